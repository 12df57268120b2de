"""The event vocabulary: every event the journal can append, with one typed payload each.

This is the one place an event type is named (DESIGN §2). The journal emits members of
:class:`EventType` with the payload :data:`PAYLOADS` assigns to them, and refuses any other
pairing; the HTTP line schema, the CLI timeline and the invariant checker match on the members,
never on strings.

Payloads are frozen stdlib dataclasses, not pydantic models, because the core imports nothing
but the standard library (``tests/core/test_layers.py``); the HTTP edge validates and publishes
them with a pydantic ``TypeAdapter``. A payload is stored as the event's ``data`` object, field
by field (tuples as JSON arrays); a field whose metadata says ``omit_if_none`` is left out while
it is ``None``, which is how those events were written before the vocabulary was typed. Fields
added later get defaults, so events stored before them still decode.

**The member values are the wire format.** Each value is the ``type`` stored with the event
and sent, unchanged, as the ``type`` of its HTTP line (admissions and settlements aside, which
the HTTP layer presents as ``turn_start``/``turn_end``). Renaming a member's value, removing a
member, or removing or retyping a payload field is a breaking change of the wire format: it
bumps :data:`WIRE_VERSION` (published in the OpenAPI document) and needs a migration of stored
events. Adding a member or a field with a default is compatible and bumps the minor part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias, TypedDict

from fxdurable.core.codec import JsonValue, dumps
from fxdurable.core.recordcodec import decode
from fxdurable.core.records import ErrorInfo, EventRecord
from fxdurable.core.states import ToolTaskStatus

__all__ = [
    "PAYLOADS",
    "SETTLED_EVENTS",
    "SETTLED_OUTCOME",
    "TOOL_SETTLED_EVENTS",
    "WHEN",
    "WIRE_VERSION",
    "AbortRequested",
    "AttemptRun",
    "AttemptYielded",
    "ContextCompacted",
    "EventType",
    "InputAnswered",
    "InputRequested",
    "ModelCallFailed",
    "ModelCompleted",
    "ModelFallback",
    "ModelText",
    "OutputRejected",
    "Payload",
    "SessionCreated",
    "StateChanged",
    "SteerDelivered",
    "SteerDropped",
    "SteerRecorded",
    "SteerRequeued",
    "SubmissionAdmitted",
    "SubmissionInterrupted",
    "SubmissionSettled",
    "TaskRef",
    "ToolRetrying",
    "ToolSettled",
    "ToolStarted",
    "ToolStepRecorded",
    "TurnStarted",
    "WebhookSettled",
    "payload_data",
    "payload_of",
    "settled_event",
    "tool_settled_event",
]

# major.minor: the major part changes with any rename or removal (see the module docstring).
# 1.8: webhook.delivered, webhook.abandoned.
# 1.7: tool.retrying, the attempts' agent_version.
# 1.6: model.fallback, output.rejected; cache and reasoning token counts.
WIRE_VERSION = "1.8"


class EventType(StrEnum):
    SESSION_CREATED = "session.created"
    SUBMISSION_ADMITTED = "submission.admitted"
    SUBMISSION_COMPLETED = "submission.completed"
    SUBMISSION_FAILED = "submission.failed"
    SUBMISSION_ABORTED = "submission.aborted"
    SUBMISSION_INTERRUPTED = "submission.interrupted"
    ABORT_REQUESTED = "abort.requested"
    STEER_RECORDED = "steer.recorded"
    STEER_DELIVERED = "steer.delivered"
    STEER_DROPPED = "steer.dropped"
    STEER_REQUEUED = "steer.requeued"
    TURN_STARTED = "turn.started"
    ATTEMPT_STARTED = "attempt.started"
    ATTEMPT_INTERRUPTED = "attempt.interrupted"
    ATTEMPT_YIELDED = "attempt.yielded"
    MODEL_PARTIAL = "model.partial"
    MODEL_COMPLETED = "model.completed"
    MODEL_ERROR = "model.error"
    MODEL_INTERRUPTED = "model.interrupted"
    MODEL_FALLBACK = "model.fallback"
    CONTEXT_COMPACTED = "context.compacted"
    OUTPUT_REJECTED = "output.rejected"
    TOOL_STARTED = "tool.started"
    TOOL_COMPLETED = "tool.completed"
    TOOL_FAILED = "tool.failed"
    TOOL_CANCELLED = "tool.cancelled"
    TOOL_OUTCOME_UNKNOWN = "tool.outcome_unknown"
    TOOL_REFUSED = "tool.refused"
    TOOL_STEP = "tool.step"
    TOOL_RETRYING = "tool.retrying"
    INPUT_REQUESTED = "input.requested"
    INPUT_ANSWERED = "input.answered"
    STATE_CHANGED = "state.changed"
    WEBHOOK_DELIVERED = "webhook.delivered"
    WEBHOOK_ABANDONED = "webhook.abandoned"


# The outcome each settlement event records (the HTTP layer sends it as ``turn_end``).
SETTLED_OUTCOME: Mapping[EventType, Literal["completed", "failed", "aborted"]] = {
    EventType.SUBMISSION_COMPLETED: "completed",
    EventType.SUBMISSION_FAILED: "failed",
    EventType.SUBMISSION_ABORTED: "aborted",
}
SETTLED_EVENTS = frozenset(SETTLED_OUTCOME)
_SETTLED: Mapping[str, EventType] = {o: t for t, o in SETTLED_OUTCOME.items()}
# The event of each terminal tool task status.
_TOOL_SETTLED: Mapping[ToolTaskStatus, EventType] = {
    ToolTaskStatus.COMPLETED: EventType.TOOL_COMPLETED,
    ToolTaskStatus.FAILED: EventType.TOOL_FAILED,
    ToolTaskStatus.CANCELLED: EventType.TOOL_CANCELLED,
    ToolTaskStatus.OUTCOME_UNKNOWN: EventType.TOOL_OUTCOME_UNKNOWN,
    ToolTaskStatus.REFUSED: EventType.TOOL_REFUSED,
}
TOOL_SETTLED_EVENTS = frozenset(_TOOL_SETTLED.values())

_OMIT_IF_NONE: Mapping[str, Any] = {"omit_if_none": True}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionCreated:
    agent: str
    # A fork (``Journal.fork``): the session it was copied from, the event cursor of the
    # source it was copied as of, and how many messages it took.
    forked_from: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    after: int | None = field(default=None, metadata=_OMIT_IF_NONE)
    messages: int | None = field(default=None, metadata=_OMIT_IF_NONE)
    # A subagent's session (``fx.subagent``): the parent session and the tool task whose
    # call started it.
    parent_session: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    parent_task: str | None = field(default=None, metadata=_OMIT_IF_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionAdmitted:
    submission: str
    request_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionSettled:
    submission: str
    text: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    error: ErrorInfo | None = field(default=None, metadata=_OMIT_IF_NONE)
    # A typed final answer's validated value (``Agent(output_type=...)``), as JSON. Typed
    # ``object``: the HTTP schema is built by pydantic (see ``StateChanged``).
    output: object = field(default=None, metadata=_OMIT_IF_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionInterrupted:
    submission: str
    interruptions: int
    unknown_calls: tuple[str, ...]
    reason: Literal["attempts_exhausted", "time_exhausted", "budget_exhausted"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortRequested:
    submissions: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SteerRecorded:
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SteerDelivered:
    round: int
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SteerDropped:
    count: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SteerRequeued:
    count: int
    submission: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStarted:
    prompt: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptRun:
    """An attempt and the worker that runs it (started) or ran it (interrupted), and the
    version of the agent it runs (``Agent.version``; None before it was kept)."""

    number: int
    worker: str
    agent_version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptYielded:
    number: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelText:
    """Text the model streamed in a round whose call is not recorded (yet, or ever)."""

    round: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCompleted:
    round: int
    text: str
    tools: tuple[str, ...]
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    # Parts of input_tokens (read from / written to the prompt cache) and of output_tokens.
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0
    # The provider's stop reason verbatim; None (with stop_inferred) when it sent none.
    stop_reason: str | None = None
    stop_inferred: bool = False
    truncated: bool = False  # cut by length/max_tokens
    # The model that answered, when the agent has a Fallback chain (which member it was).
    model: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    # What a person may read of its reasoning (thinking, summaries; cut to a few thousand
    # characters, the journal keeps it all), and how many pieces had none to read (redacted,
    # encrypted). Shown collapsed, never as answer text; absent when the model sent none.
    thinking: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    thinking_hidden: int | None = field(default=None, metadata=_OMIT_IF_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFallback:
    """The turn switched to the next model of its Fallback chain (and stays on it)."""

    round: int
    from_model: str
    to_model: str
    reason: str  # the failure that made it switch
    # The provider-owned parts of earlier responses (thinking, reasoning items) that the new
    # model's wire cannot read, so its requests leave them out; 0 when nothing is dropped.
    dropped_parts: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallFailed:
    round: int
    code: str
    message: str
    errors: int  # the turn's model errors so far, this one included


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCompacted:
    upto: int
    summary: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0


class TaskRef(TypedDict):
    """The fields every tool event names its task by: its id and its position."""

    task: str
    tool: str
    round: int
    index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStarted:
    task: str
    tool: str
    round: int
    index: int
    policy: str
    run: int
    execution_id: str
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStepRecorded:
    task: str
    tool: str
    round: int
    index: int
    step: str
    run: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRetrying:
    """A run of a call with a ``Retry`` failed with a retryable error: the call runs again
    after ``delay_s`` (runtime/tool_retry.py)."""

    task: str
    tool: str
    round: int
    index: int
    failed_runs: int  # how many runs of this execution failed so far
    error: str  # "Type: message"
    delay_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSettled:
    task: str
    tool: str
    round: int
    index: int
    result: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequested:
    """The turn asked a person (``about``: ``tool``, ``exhausted`` or ``budget``) and waits for
    the answer. A question about a tool call names it (its task, tool and position)."""

    question: str
    about: str
    task: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    tool: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    round: int | None = field(default=None, metadata=_OMIT_IF_NONE)
    index: int | None = field(default=None, metadata=_OMIT_IF_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class InputAnswered:
    """The answer to the pending question: ``allow``, ``deny`` (with ``reason``) or
    ``rewrite`` (the call's new input is on its task, not here: it may hold secrets)."""

    answer: str
    about: str
    reason: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    task: str | None = field(default=None, metadata=_OMIT_IF_NONE)
    tool: str | None = field(default=None, metadata=_OMIT_IF_NONE)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChanged:
    """A commit of persisted state (``ctx.state``): the keys set, with their new values, and
    the keys deleted. ``task`` names the call whose result (or durable ``step``) committed
    it; a fork's first state has no task (``step`` and ``task`` null): it is the source's
    state at the fork's point."""

    # JSON values; typed ``object`` because the HTTP schema is built by pydantic, which cannot
    # follow the recursive ``JsonValue`` alias.
    set: dict[str, object]
    deleted: tuple[str, ...] = ()
    task: str | None = None
    tool: str | None = None
    step: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRejected:
    """A typed final answer did not validate: ``message`` is what the model was told (a user
    message of the turn), ``rejections`` how many of the turn's answers were rejected."""

    round: int
    message: str
    rejections: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookSettled:
    """A settlement webhook's end: delivered (``status``, the receiver's HTTP status) or
    abandoned after ``attempts`` (``error``, the last failure)."""

    submission: str
    attempts: int
    status: int | None = field(default=None, metadata=_OMIT_IF_NONE)
    error: str | None = field(default=None, metadata=_OMIT_IF_NONE)


Payload: TypeAlias = (
    SessionCreated
    | SubmissionAdmitted
    | SubmissionSettled
    | SubmissionInterrupted
    | AbortRequested
    | SteerRecorded
    | SteerDelivered
    | SteerDropped
    | SteerRequeued
    | TurnStarted
    | AttemptRun
    | AttemptYielded
    | ModelText
    | ModelCompleted
    | ModelFallback
    | ModelCallFailed
    | ContextCompacted
    | OutputRejected
    | ToolStarted
    | ToolSettled
    | ToolStepRecorded
    | ToolRetrying
    | InputRequested
    | InputAnswered
    | StateChanged
    | WebhookSettled
)

_E = EventType
PAYLOADS: Mapping[EventType, type[Payload]] = {
    _E.SESSION_CREATED: SessionCreated,
    _E.SUBMISSION_ADMITTED: SubmissionAdmitted,
    _E.SUBMISSION_COMPLETED: SubmissionSettled,
    _E.SUBMISSION_FAILED: SubmissionSettled,
    _E.SUBMISSION_ABORTED: SubmissionSettled,
    _E.SUBMISSION_INTERRUPTED: SubmissionInterrupted,
    _E.ABORT_REQUESTED: AbortRequested,
    _E.STEER_RECORDED: SteerRecorded,
    _E.STEER_DELIVERED: SteerDelivered,
    _E.STEER_DROPPED: SteerDropped,
    _E.STEER_REQUEUED: SteerRequeued,
    _E.TURN_STARTED: TurnStarted,
    _E.ATTEMPT_STARTED: AttemptRun,
    _E.ATTEMPT_INTERRUPTED: AttemptRun,
    _E.ATTEMPT_YIELDED: AttemptYielded,
    _E.MODEL_PARTIAL: ModelText,
    _E.MODEL_COMPLETED: ModelCompleted,
    _E.MODEL_ERROR: ModelCallFailed,
    _E.MODEL_INTERRUPTED: ModelText,
    _E.MODEL_FALLBACK: ModelFallback,
    _E.CONTEXT_COMPACTED: ContextCompacted,
    _E.OUTPUT_REJECTED: OutputRejected,
    _E.TOOL_STARTED: ToolStarted,
    _E.TOOL_COMPLETED: ToolSettled,
    _E.TOOL_FAILED: ToolSettled,
    _E.TOOL_CANCELLED: ToolSettled,
    _E.TOOL_OUTCOME_UNKNOWN: ToolSettled,
    _E.TOOL_REFUSED: ToolSettled,
    _E.TOOL_STEP: ToolStepRecorded,
    _E.TOOL_RETRYING: ToolRetrying,
    _E.INPUT_REQUESTED: InputRequested,
    _E.INPUT_ANSWERED: InputAnswered,
    _E.STATE_CHANGED: StateChanged,
    _E.WEBHOOK_DELIVERED: WebhookSettled,
    _E.WEBHOOK_ABANDONED: WebhookSettled,
}

# When each event is appended: the README's vocabulary table is generated from this.
WHEN: Mapping[EventType, str] = {
    _E.SESSION_CREATED: (
        "the first admission to a new session, a fork of another (`Runtime.fork`), or a "
        "subagent's child session (`fx.subagent`)"
    ),
    _E.SUBMISSION_ADMITTED: "a prompt (or steering with no turn in flight) was admitted",
    _E.SUBMISSION_COMPLETED: "the submission settled with the model's final answer",
    _E.SUBMISSION_FAILED: "the submission settled failed (`error` says why)",
    _E.SUBMISSION_ABORTED: "the submission settled aborted",
    _E.SUBMISSION_INTERRUPTED: "just before `submission.failed`, when interruptions spent its "
    "budget: the calls left unknown",
    _E.ABORT_REQUESTED: "an abort intent was recorded on the unsettled submissions",
    _E.STEER_RECORDED: "steering text is waiting for the turn's next model call",
    _E.STEER_DELIVERED: "pending steering was shown to the model in a round",
    _E.STEER_DROPPED: "pending steering was dropped with the turn it steered (abort)",
    _E.STEER_REQUEUED: "steering whose turn settled first became a submission of its own",
    _E.TURN_STARTED: "a submission's turn started (its prompt joins the conversation)",
    _E.ATTEMPT_STARTED: "a worker began (or resumed) the turn",
    _E.ATTEMPT_INTERRUPTED: "a later owner found the attempt still running: its process died",
    _E.ATTEMPT_YIELDED: "the attempt stopped at a step boundary (deadline, shutdown); a "
    "continuation follows",
    _E.MODEL_PARTIAL: "streamed text of a model call not recorded yet",
    _E.MODEL_COMPLETED: "a model response was recorded, with the tool calls it asked for",
    _E.MODEL_ERROR: "a transient model failure; the call is retried",
    _E.MODEL_INTERRUPTED: "recovery closed out a dead attempt's partial as an aborted reply",
    _E.MODEL_FALLBACK: "the turn switched to the next model of its `Fallback` chain (overload, "
    "retries spent, or an error it lists); `dropped_parts` counts reasoning the new provider "
    "cannot read",
    _E.CONTEXT_COMPACTED: "messages up to `upto` were summarised",
    _E.OUTPUT_REJECTED: "a typed final answer did not validate; the model is told why and "
    "asked again (`Agent(output_retries=...)`)",
    _E.TOOL_STARTED: "the intent to run a tool call was recorded (`run` > 1: a re-execution)",
    _E.TOOL_COMPLETED: "a tool call returned",
    _E.TOOL_FAILED: "a tool call raised, or was invalid or denied (the model reads `result`)",
    _E.TOOL_CANCELLED: "a tool call was cancelled (abort)",
    _E.TOOL_OUTCOME_UNKNOWN: "an unsafe call was interrupted: it may or may not have happened",
    _E.TOOL_REFUSED: "a blind repeat of an unknown call was refused once",
    _E.TOOL_STEP: "a durable tool's step returned and its value was recorded (replayed, not "
    "re-run, if the call re-executes)",
    _E.TOOL_RETRYING: "a run of a call with `retry=fx.Retry(...)` failed with a retryable "
    "error; the same execution runs again after `delay_s`",
    _E.INPUT_REQUESTED: "the turn asks a person (`before_tool` returned `ask`, or its attempts "
    'ran out with `on_exhausted="ask"`); it waits, holding no lease, until answered',
    _E.INPUT_ANSWERED: "the pending question was answered (`allow`, `deny`, `rewrite`); the "
    "turn is queued to resume",
    _E.STATE_CHANGED: "a tool call's `ctx.state` writes were committed with its result (or "
    "with its durable `step`), or a fork took its source's state",
    _E.WEBHOOK_DELIVERED: "the submission's settlement webhook was answered with a 2xx",
    _E.WEBHOOK_ABANDONED: "the settlement webhook failed its every attempt (or the agent no "
    "longer has one): no more are made",
}


def settled_event(outcome: str) -> EventType:
    """The event of a submission settling with ``outcome`` (completed, failed, aborted)."""
    return _SETTLED[outcome]


def tool_settled_event(status: ToolTaskStatus) -> EventType:
    """The event of a tool task reaching the terminal ``status``."""
    return _TOOL_SETTLED[status]


def payload_data(event_type: EventType, payload: Payload) -> dict[str, JsonValue]:
    """The ``data`` object stored for ``payload``; refuses a payload of another event type."""
    expected = PAYLOADS[event_type]
    if type(payload) is not expected:
        raise TypeError(
            f"event {event_type.value!r} carries a {expected.__name__} payload, "
            f"not {type(payload).__name__}"
        )
    return _fields(payload)


def payload_of(event: EventRecord) -> Payload | None:
    """The typed payload of a stored event; None for a type this version does not know (a
    newer writer's). Fields added since the event was written take their defaults."""
    try:
        event_type = EventType(event.type)
    except ValueError:
        return None
    return decode(PAYLOADS[event_type], dumps(event.data))


def _fields(record: Any) -> dict[str, JsonValue]:
    return {
        f.name: _plain(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if not (f.metadata.get("omit_if_none") and getattr(record, f.name) is None)
    }


def _plain(value: Any) -> JsonValue:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields(value)
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    result: JsonValue = value
    return result
