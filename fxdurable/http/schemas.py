"""The JSON bodies the API reads and writes. These models are the OpenAPI document's schemas.

Field names are camelCase on the wire (``sessionId``); unknown fields are refused, so a typo
is an error rather than a silently ignored option.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from fxdurable.http.scoping import SESSION_ID_PATTERN, SESSION_KEY_PATTERN

__all__ = [
    "AbortReply",
    "AbortRequest",
    "AnswerReply",
    "AnswerRequest",
    "ChatReceipt",
    "ChatRequest",
    "CrashReply",
    "DemoReply",
    "ErrorReply",
    "ForkReply",
    "ForkRequest",
    "HistoryReply",
    "RunningTask",
    "SessionReply",
    "SessionSummary",
    "SessionsReply",
    "SteerReply",
    "SteerRequest",
    "TraceLine",
    "TraceReply",
    "TraceTotals",
    "WakeReply",
    "WakeRequest",
]

# A caller's own name for a session: the same id for two callers is two sessions.
SessionId = Annotated[str, StringConstraints(pattern=SESSION_ID_PATTERN)]
# A session's store key (``alice/ops-1``): what wake messages carry.
SessionKey = Annotated[str, StringConstraints(pattern=SESSION_KEY_PATTERN)]


class _Body(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class AttachmentIn(_Body):
    """An image or a document sent with a prompt: its bytes as base64 (``data``) or an
    ``https://`` URL the provider fetches (docs/attachments.md)."""

    media_type: str = Field(
        description="image/png, image/jpeg, image/gif, image/webp or application/pdf"
    )
    data: str | None = Field(default=None, description="the bytes, base64")
    url: str | None = Field(default=None, description="an https:// URL, instead of data")
    name: str | None = Field(default=None, max_length=200)


class ChatRequest(_Body):
    """Start a turn. Without ``sessionId`` a new session is created for the caller.

    Session ids are the caller's own: another caller's ``ops-1`` is another session.
    """

    prompt: Annotated[str, Field(min_length=1)]
    session_id: SessionId | None = None
    agent: str | None = Field(default=None, description="required when the server has several")
    when_busy: Literal["queue", "reject"] = Field(
        default="queue",
        description="'reject': answer 409 (AgentBusyError) instead of queueing behind a turn",
    )
    attachments: list[AttachmentIn] = Field(
        default_factory=list, max_length=20, description="images and documents of the prompt"
    )


class SteerRequest(_Body):
    session_id: SessionId
    text: Annotated[str, Field(min_length=1)]


class AbortRequest(_Body):
    session_id: SessionId


class ForkRequest(_Body):
    """Start the caller's session ``newSessionId`` from this one's conversation as it was
    ``after`` a point. Naming the new id makes a retry the same fork."""

    new_session_id: SessionId
    # Strict: JSON true is not cursor 1 (bool is an int in Python, and lax parsing reads it
    # as one), nor is 1.5 cursor 1.
    after: (
        Annotated[int, Field(ge=1, le=2**53, strict=True)]
        | Annotated[str, Field(min_length=1, max_length=200)]
        | None
    ) = Field(
        default=None,
        description="a submission id (the conversation once it settled), a line cursor "
        "(after any recorded step: a model reply, a tool result), or absent (everything "
        "recorded so far)",
    )


class AnswerRequest(_Body):
    """Answer the question the session's turn waits on (its ``before_tool`` hook asked, or
    its attempts ran out): ``allow``, ``deny`` (with ``reason``, which the model reads) or
    ``rewrite`` (with ``input``, the call's new input, checked against the tool)."""

    answer: Literal["allow", "deny", "rewrite"]
    reason: Annotated[str, Field(min_length=1, max_length=2000)] | None = Field(
        default=None, description="deny only: why (the model reads 'denied: <reason>')"
    )
    input: dict[str, Any] | None = Field(
        default=None, description="rewrite only (and required there): the call's new input"
    )


class AnswerReply(_Body):
    session_id: str
    submission_id: str = Field(description="the submission that was waiting; it runs again")
    answer: str
    cursor: int = Field(description="GET /chat from here: the turn goes on after the answer")


class WakeRequest(_Body):
    """Wake a session, named by its store key: ``<principal>/<sessionId>`` for a session made
    over HTTP (``alice/ops-1``), the plain id for one made in process."""

    session_id: SessionKey
    reason: str | None = None


class ChatReceipt(_Body):
    """Receipt mode's answer to ``POST /chat``: the prompt is admitted and its wake queued."""

    session_id: str
    submission_id: str
    cursor: int = Field(description="GET /chat from here: the next line is this turn's start")


class SteerReply(_Body):
    session_id: str
    steered: bool = Field(description="False: nothing was running, so it became a new turn")
    submission_id: str
    cursor: int


class AbortReply(_Body):
    session_id: str
    aborted: list[str]


class SubmissionState(_Body):
    id: str
    status: str
    prompt: str
    result: str | None = None
    output: Any = Field(
        default=None,
        description="a typed agent's validated final answer (Agent(output_type=...)), as JSON; "
        "null otherwise",
    )
    error: dict[str, Any] | None = None
    question: str | None = Field(
        default=None,
        description="what its turn asks a person while it waits for input (answer it with "
        "POST /sessions/{id}/answer); null otherwise",
    )


class RunningTask(_Body):
    """The tool call in flight: ``progress`` is the tail of what it reported so far."""

    task_id: str
    tool: str
    turn_id: str
    progress: str | None = Field(description="the last 4 KB of its progress reports")
    progress_at: float | None = Field(description="when progress was written (unix seconds)")
    child_session: str | None = Field(
        default=None, description="a subagent call's child session: GET /sessions/{it}"
    )


class SessionReply(_Body):
    session_id: str
    agent: str
    status: str
    cursor: int = Field(description="the latest line's cursor: GET /chat from here")
    steering_pending: int
    submissions: list[SubmissionState] = Field(description="the latest 20, oldest first")
    running_task: RunningTask | None = Field(
        default=None, description="the tool call in flight, with its progress; null between calls"
    )
    parent_session: str | None = Field(
        default=None, description="a subagent's child session: the session whose call started it"
    )
    parent_task: str | None = Field(default=None, description="... and that call's task id")
    state: dict[str, Any] = Field(
        default_factory=dict,
        description="the session's persisted state (what tools wrote with ctx.state), as "
        "committed: a call's writes appear with its result",
    )


class AttachmentOut(_Body):
    """An image or document of a history entry: its blob's digest and size, or its URL;
    never the bytes."""

    media_type: str
    digest: str | None = None
    url: str | None = None
    size: int = 0
    name: str | None = None


class HistoryMessage(_Body):
    role: str
    text: str
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    # A reply a crash cut off mid-stream: recovery kept the text streamed so far.
    interrupted: bool = False
    attachments: list[AttachmentOut] = Field(default_factory=list)


class HistoryReply(_Body):
    session_id: str
    messages: list[HistoryMessage]


class ForkReply(_Body):
    session_id: str = Field(description="the fork: talk to it with POST /chat")
    forked_from: str
    after: int = Field(description="the source's line cursor the fork was copied as of")
    messages: int = Field(description="how many messages the fork took")
    created: bool = Field(description="False: this fork existed already (a retry)")


class SessionSummary(_Body):
    """One row of ``GET /sessions``."""

    id: str
    agent: str
    state: Literal["idle", "queued", "running", "waiting"] = Field(
        description="idle: nothing unsettled; waiting: a question waits for an answer "
        "(POST /sessions/{id}/answer); running: a turn runs; queued: work waits for a worker"
    )
    last_outcome: Literal["completed", "failed", "aborted"] | None = Field(
        description="how the latest settled submission ended; null before any settled"
    )
    unsettled: int = Field(description="queued and running submissions")
    question: str | None = Field(description="the question waiting for an answer, or null")
    created_at: float = Field(description="unix seconds")
    updated_at: float = Field(description="when its latest line was recorded (unix seconds)")


class SessionsReply(_Body):
    sessions: list[SessionSummary] = Field(description="newest updated first")
    next: str | None = Field(description="pass as `after` for the next page; null on the last page")


class TraceLine(_Body):
    at: float
    kind: str = Field(
        description="an event type (model.completed, tool.outcome_unknown, ...), or "
        "'session' (the header), 'submission' (a turn's summary), 'total' (the token total)"
    )
    text: str = Field(description="the line as `fxdurable trace` prints it, without colour")
    cursor: int | None = Field(
        description="the event's cursor (GET /chat from it); null on the header and summary lines"
    )
    fork_after: int | str | None = Field(
        description="pass as `after` to POST /sessions/{id}/fork to fork at this line: an "
        "event cursor after a recorded step, a settled submission's id; null where none is"
    )


class TraceTotals(_Body):
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    cache_read_tokens: int = Field(0, description="input tokens read from the prompt cache")
    cache_creation_tokens: int = Field(0, description="input tokens written to the prompt cache")
    reasoning_tokens: int = Field(0, description="output tokens the model spent reasoning")
    turns: int = Field(description="submissions")
    attempts: int
    interruptions: int = Field(description="attempts a crash ended")


class TraceReply(_Body):
    session_id: str
    lines: list[TraceLine]
    totals: TraceTotals


class DemoReply(_Body):
    """``GET /demo``, answered in demo mode only (``fxdurable serve --dev --demo``)."""

    demo: Literal[True] = True
    worker: int = Field(description="the pid of the worker process that runs the turns")


class CrashReply(_Body):
    killed: int = Field(description="the worker process SIGKILLed")
    worker: int = Field(description="its replacement, which recovers the turns in flight")


class WakeReply(_Body):
    session_id: str
    status: str


class ErrorReply(_Body):
    code: str
    message: str
    error: str | None = None
