"""The durable records. Frozen: a change is a new record written with a version check.

Identity derives from position, never from timing (DESIGN §9): a model call is
``(turn_id, round)``, a tool task is ``(turn_id, round, index)`` in the order the model asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from fxdurable.core.codec import JsonObject
from fxdurable.core.recordcodec import OMIT_DEFAULT
from fxdurable.core.states import (
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
)

__all__ = [
    "ATTACHMENT_TYPES",
    "AttachmentRef",
    "AttemptRecord",
    "ErrorInfo",
    "EventRecord",
    "InputAnswer",
    "InputRequest",
    "Lease",
    "MessageRecord",
    "ModelCallRecord",
    "PendingWebhook",
    "SessionRecord",
    "StepRecord",
    "SubmissionRecord",
    "ToolCallRequest",
    "ToolTaskRecord",
    "TurnRecord",
    "Usage",
    "usage_fields",
]


# The media types a prompt or a tool result may carry (docs/attachments.md): images every
# provider reads, and PDF documents where the provider takes them.
ATTACHMENT_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachmentRef:
    """An image or a document in a prompt or a tool result, as the journal keeps it: its bytes
    are a content-addressed blob of the store (``digest``; offloaded to S3 on DynamoDB), or it
    is a URL the provider fetches. Never the bytes themselves: records and events stay small."""

    media_type: str  # one of ATTACHMENT_TYPES
    digest: str | None = None  # the blob's sha256 (bytes given)
    url: str | None = None  # or a URL (https:) the provider reads
    size: int = 0  # bytes, when given as bytes
    name: str | None = None  # a file name, when known (PDFs are sent with one)


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """Who may write a session now. ``token`` is the fencing token: it only ever grows."""

    owner: str | None = None
    token: int = 0
    expires_at: float = 0.0
    host: str | None = None
    pid: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWebhook:
    """A settled submission whose settlement webhook (``Agent(webhook=)``) is not delivered
    yet: recorded with the settlement, in its commit, so a crash after it still delivers.
    ``attempts`` failed so far; the next is not tried before ``next_at`` (journal clock)."""

    submission_id: str
    attempts: int = 0
    next_at: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    id: str
    agent: str
    status: SessionStatus
    lease: Lease = field(default_factory=Lease)
    # Who may read and write this session over HTTP; None for sessions made in process.
    owner: str | None = None
    # Steering typed while a turn runs, not yet shown to the model (DESIGN §3.2). It is
    # delivered with the turn's next model call, atomically with that call's record.
    steering: tuple[str, ...] = ()
    next_event_seq: int = 1  # the cursor of the next event: events are gap-free from 1
    next_message_seq: int = 1
    # The ``summarizes_upto`` of the latest compaction summary (0: none yet). The model is
    # sent only messages past it (the summary among them), so a cold read starts there.
    compacted_upto: int = 0
    next_submission_seq: int = 1
    # A subagent's session (``fx.subagent``): the session and the tool task whose call
    # started it. Set once, at creation; None for every other session.
    parent_session: str | None = None
    parent_task: str | None = None
    created_at: float
    # When its latest event was recorded, and how its latest settled submission ended
    # ("completed", "failed", "aborted"): kept on the record so listing sessions
    # (``GET /sessions``) reads one record per session, not its events or submissions. None
    # on a record written before they existed (the list falls back to ``created_at``).
    updated_at: float | None = None
    last_outcome: str | None = None
    # The persisted key/value state (``ctx.state``, :mod:`fxdurable.core.session_state`):
    # changed only with the step that wrote it, each change a ``state.changed`` event.
    # Read-only: a change is a new record (the journal never mutates this mapping).
    state: JsonObject = field(default_factory=dict)
    # What every model call of the session spent so far (the session spending budget).
    spent: Usage = field(default_factory=lambda: Usage())
    # Settlement webhooks still to deliver, oldest first. While any is, the session stays
    # ``active`` (the sweep's index), so a scan finds it after a crash.
    webhooks: tuple[PendingWebhook, ...] = field(default=(), metadata=OMIT_DEFAULT)
    # Retention (:mod:`fxdurable.core.retention`, docs/erasure.md "Retention"): the agent's
    # ``retention_days`` as its latest admission recorded it (None: kept forever), and when
    # the session falls due for the retention sweep's erase: set while it is idle, None while
    # anything is unsettled. Kept on the record so the sweep needs no agent registry.
    retention_days: float | None = field(default=None, metadata=OMIT_DEFAULT)
    retain_until: float | None = field(default=None, metadata=OMIT_DEFAULT)
    version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorInfo:
    """A structured failure a user (and an operator reading the trace) can act on."""

    code: str
    message: str
    unknown_calls: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class InputAnswer:
    """A person's answer to a question a turn asked (:mod:`fxdurable.core.asking`).

    ``kind`` is ``"allow"``, ``"deny"`` (``reason`` says why) or ``"rewrite"`` (``arguments``
    is the call's new input as JSON text, validated against the tool's input model)."""

    kind: str
    reason: str | None = None
    arguments: str | None = None
    at: float
    # Recorded by the question's expiry (``Journal.expire_input``), not by a person.
    timed_out: bool = field(default=False, metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequest:
    """A question the turn asked a person, and the answer once given (``needs_input``).

    ``about`` is ``"tool"`` (a ``before_tool`` hook returned ``ask``: ``task_id`` names the
    call, which has no intent recorded) or ``"exhausted"`` (the attempt budget ran out and
    the agent's ``Durability(on_exhausted="ask")`` asks whether to go on)."""

    question: str
    about: str
    task_id: str | None = None
    tool: str | None = None
    asked_at: float
    answer: InputAnswer | None = None
    # A question may expire (``ask(..., timeout_s=)``): at ``expires_at`` it is answered by
    # ``on_timeout`` (``deny``, ``allow`` or ``fail``) unless a person answered first.
    expires_at: float | None = field(default=None, metadata=OMIT_DEFAULT)
    on_timeout: str | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionRecord:
    id: str
    session_id: str
    seq: int  # admission order within the session
    request_id: str
    prompt: str
    status: SubmissionStatus
    cursor: int = 0  # the seq of its ``submission.admitted`` event: a stream starts there
    attempts: int = 0  # attempts started
    interruptions: int = 0  # attempts that ended in a crash
    abort_requested: bool = False
    result_text: str | None = None
    # A typed final answer (``Agent(output_type=...)``): the validated value as JSON text.
    output: str | None = None
    error: ErrorInfo | None = None
    created_at: float
    started_at: float | None = None
    settled_at: float | None = None
    # The W3C traceparent of the turn's admission, when it was traced: every attempt's span
    # joins that trace, even one woken by a scan or a continuation that carries no context.
    trace_parent: str | None = None
    # The prompt's images and documents (their blobs, put before the admission, or URLs).
    attachments: tuple[AttachmentRef, ...] = ()
    # The latest question the turn asked a person. While it has no answer (and no abort was
    # asked) the submission waits for input: it stays ``running`` but no worker runs it.
    input_request: InputRequest | None = None
    version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRecord:
    submission_id: str
    number: int
    status: AttemptStatus
    worker: str
    started_at: float
    ended_at: float | None = None
    reason: str | None = None
    version: int = 1
    # The version of the agent this attempt ran (Agent.version): in a rolling deploy a turn's
    # attempts may run on different versions. None on records written before it was kept.
    agent_version: str | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    id: str
    session_id: str
    submission_id: str
    status: TurnStatus
    # The version of the agent that started this turn (Agent.version; each attempt records
    # its own too). None on records written before it was kept.
    agent_version: str | None = field(default=None, metadata=OMIT_DEFAULT)
    rounds: int = 0  # model calls recorded so far
    model_errors: int = 0  # transient model failures so far: the turn's error budget
    # When the model may be called again after the last transient failure (journal clock):
    # a backoff, honouring Retry-After, that outlives the invocation which recorded it.
    model_retry_at: float | None = None
    final_text: str | None = None
    # Text streamed in round ``rounds`` and not recorded yet (``model.partial``): if the
    # attempt dies, recovery closes it out as an interrupted assistant entry.
    partial_text: str = ""
    # The model of the agent's Fallback chain this turn is on (its name; None: the first):
    # a switch is recorded here, so a recovered turn goes on with the model it had reached.
    model: str | None = None
    # What this turn's model calls spent so far (compaction included), and the session's
    # total as of the same commit: the spending budgets (runtime/spend.py) read both here,
    # so a recovered turn counts what its dead attempt spent. Zero on older records.
    spent: Usage = field(default_factory=lambda: Usage())
    session_spent: Usage = field(default_factory=lambda: Usage())
    # How many times a person allowed this turn past a spent spending budget (each allow
    # grants one more budget of the same size).
    spend_grants: int = 0
    # Typed final answers (``Agent(output_type=...)``): answers rejected so far, and the round
    # whose answer the latest rejection answered (the model is called again after it).
    output_rejections: int = 0
    rejected_round: int | None = None
    # Paused model calls (Anthropic ``pause_turn``): how many in a row end the turn so far,
    # and their text, which the answer that continues them starts with.
    pauses_in_row: int = 0
    paused_text: str = ""
    version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRequest:
    """One tool call as the model asked for it. ``provider_id`` is echoed back, never trusted."""

    name: str
    arguments: str  # the raw JSON text the model produced
    provider_id: str | None = None
    # What the provider sent with this call and must get back, verbatim (docs/reasoning.md):
    # ``wire`` names the format that wrote ``parts`` ("anthropic", "openai-chat"); a request
    # in another format ignores them. Anthropic: the response's content blocks after the
    # previous call up to this call's own ``tool_use`` (thinking with its signature,
    # redacted thinking, server-tool blocks, text), unknown fields kept. Chat completions:
    # the assistant message's own fields (``reasoning_content``, ``reasoning_details``, ...)
    # and the call's (``extra_content`` thought signatures, ...). Empty on older records.
    wire: str | None = None
    parts: tuple[JsonObject, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """One model call's tokens as the provider counted them. ``input_tokens`` is every input
    token, the cached ones included: ``cache_read_tokens`` were read from the provider's
    prompt cache, ``cache_creation_tokens`` written to it (Anthropic bills those apart);
    ``reasoning_tokens`` are part of ``output_tokens``. Records written before these fields
    existed decode with 0. ``cost_usd`` is the call's whole cost."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # when the agent knows its model's prices
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        """Both calls' tokens; the cost is known when either's is."""
        cost = None
        if self.cost_usd is not None or other.cost_usd is not None:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=cost,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


def usage_fields(usage: Usage) -> dict[str, Any]:
    """``usage``'s fields by name: the token counts every event and total that reports a
    model call's usage carries under the same names."""
    return {f.name: getattr(usage, f.name) for f in fields(usage)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallRecord:
    turn_id: str
    round: int
    status: ModelCallStatus
    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None  # the provider's value verbatim ("stop", "max_tokens", ...)
    stop_inferred: bool = False  # the provider sent none; inferred from the content
    truncated: bool = False  # cut by the output limit (length / max_tokens)
    # The name of the model that answered (None on records written before it was kept).
    model: str | None = None
    created_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One completed step of a durable tool call (``ctx.step``): its value or the error it
    raised, recorded once and served from here when the call re-executes after a crash."""

    name: str
    value: str  # the step's return value as canonical JSON text ("null" when it raised)
    run: int  # the task's run that recorded it
    at: float
    # The step raised (runtime/steps.py): its exception as JSON text ({"type", "message",
    # "args"}), re-raised on replay so the branch taken after it is the branch replayed.
    error: str | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolTaskRecord:
    id: str
    session_id: str
    turn_id: str
    round: int
    index: int
    tool: str
    arguments: str
    provider_id: str | None
    policy: str  # "safe" | "idempotent" | "unsafe"
    status: ToolTaskStatus
    execution_id: str
    runs: int = 0  # executions started
    result: str | None = None  # what the model reads for this call, whatever the status
    # Images and documents the call returned with its result (their blobs or URLs).
    attachments: tuple[AttachmentRef, ...] = ()
    # What the running call reported so far (``ctx.progress``): the tail of its chunks, at
    # most ``MAX_PROGRESS_CHARS``. State, not history: each report overwrites it, no event
    # records it, and every status change (a run starting, the call settling) clears it, so
    # only a running task carries it and the result replaces it.
    progress: str | None = None
    progress_at: float | None = None  # when ``progress`` was written (journal clock)
    # Some run of this call was started as a durable tool (``@tool(durable=True)``): its
    # completed steps are in ``steps``, in the order they were recorded, unique by name.
    durable: bool = False
    steps: tuple[StepRecord, ...] = ()
    # A person's answer to the question its ``before_tool`` hook asked: applied when the call
    # is run (the hook is not asked again). A rewrite also replaced ``arguments``.
    answer: InputAnswer | None = None
    # A subagent call (``fx.subagent``): the child session it submitted its task to, set in
    # the transaction that admitted the child's submission. Recovery and a redeploy read it
    # (the call was a subagent's, whatever the agent declares now).
    child_session: str | None = None
    updated_at: float
    version: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageContent:
    """A response's own content where no tool call carries it (see ``ToolCallRequest.parts``):
    ``parts`` in the format ``wire`` names, verbatim; ``container`` is the code-execution
    container it ran in (Anthropic), which the request that continues it names again."""

    wire: str | None = None
    parts: tuple[JsonObject, ...] = ()
    container: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    """A conversation entry. Tool results are not messages: they are read from the tasks.

    A ``"summary"`` message stands for every message up to ``summarizes_upto`` (a compaction):
    the model is sent the summary instead of them; the originals stay for the trace.
    """

    session_id: str
    seq: int
    turn_id: str
    role: str  # "user" | "assistant" | "summary"
    text: str
    round: int | None = None  # for assistant messages: which model call produced it
    tool_calls: tuple[ToolCallRequest, ...] = ()
    summarizes_upto: int | None = None
    # An assistant entry cut off mid-stream by a crash: its text is what had been streamed;
    # the round's answer, when it comes, is a later entry of the same round.
    interrupted: bool = False
    # An assistant entry without tool calls whose provider content is more than its text (a
    # paused turn's server-tool blocks), kept verbatim.
    content: MessageContent | None = None
    # A user entry's images and documents (their blobs or URLs), in the order given.
    attachments: tuple[AttachmentRef, ...] = ()
    # The seq of the event its transaction wrote right after it: "the conversation as it was
    # after event N" is the messages with ``cursor <= N`` (a fork's point). None: recorded
    # before forks existed (:mod:`fxdurable.core.fork` says how those are placed).
    cursor: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord:
    session_id: str
    seq: int
    type: str  # an EventType value, kept a str: events of a newer writer still read
    turn_id: str | None
    data: JsonObject
    at: float
