"""The errors users can catch, and the control-flow signals they cannot swallow.

FxDurableError
 ├── ConfigurationError        a bad URL, an unknown agent, a missing setting
 │    └── UnknownAgentError    a worker lacks the agent a session is bound to
 ├── AdmissionError
 │    ├── AgentBusyError       when_busy="reject" and the session has unsettled work
 │    ├── AgentMismatchError   the session is bound to another agent
 │    ├── RequestConflictError a request id reused with a different session or prompt
 │    ├── SessionExistsError   a fork into an id already taken (by anything but that fork)
 │    └── ForkPointError       a fork's ``after=`` names no settled point of the source
 ├── AnswerError              an answer to a turn's question was not recorded (nothing written)
 │    ├── NoPendingQuestionError  the session waits for no answer (none asked, or answered)
 │    └── InvalidAnswerError   a rewrite whose input does not validate, or not for this question
 ├── StoreError
 │    ├── IllegalTransitionError  a state machine refused a transition (rolled back)
 │    ├── ConflictError        a version check failed: someone else wrote first
 │    ├── LeaseLostError       the fencing token is stale: another worker owns the session
 │    ├── RecordNotFoundError
 │    ├── BlobCorruptError     a stored blob's bytes do not hash to its digest: never returned
 │    ├── SchemaOutdatedError  the store's schema or layout lacks a step only ``fxdurable
 │    │                        migrate URL`` applies: nothing written
 │    └── StoreUnavailableError  locked past the busy timeout, an I/O error, no answer:
 │         │                     nothing written; the same call may succeed later
 │         └── StoreFullError  out of space (a full disk): free some, then retry
 ├── BlobTooLargeError         a blob past ``MAX_BLOB_BYTES`` (``store.put_blob``): nothing stored
 ├── AttachmentError           an image or document refused (type, bytes, size, URL): nothing
 │                              written; or a stored one's blob missing when a turn reads it
 ├── QueueError                a wake could not be sent, or a received one cannot be read
 │    ├── QueueUnavailableError  the queue did not answer (unreachable, timed out, throttled):
 │    │                         nothing was sent; the store still holds the work
 │    └── WakeNotSentError      a prompt admitted whose wake was not queued: the scan runs it
 ├── ToolInputError            tool arguments that do not validate (the model reads it)
 ├── ToolOutcomeUnknownError   a tool cannot tell whether its effect happened: settled by its
 │                              replay policy as an interrupted call (unsafe: outcome_unknown)
 ├── MCPError                  an MCP server's tool could not be used (``fxdurable[mcp]``)
 │    ├── MCPConnectError      no connection within the connect timeout: nothing was sent
 │    ├── MCPToolChangedError  the server no longer offers the tool (or changed its schema)
 │    ├── MCPToolError         the server answered with an error (the model reads it)
 │    ├── MCPServerLostError   the server went away mid-call (also ToolOutcomeUnknownError)
 │    └── MCPTimeoutError      no answer within the call timeout (also ToolOutcomeUnknownError)
 ├── WorkspaceError            a workspace tool could not do it (the model reads it)
 │    ├── PathRefusedError     a path that would leave the workspace, or names a special file
 │    └── EditError            edit_file's old text missing or ambiguous, its file not text
 ├── StepError                 ctx.step misused: a repeated name, a value that is not JSON
 ├── SubagentError             a subagent's child session failed or was aborted (the model reads it)
 ├── StateError                ctx.state misused: a key not a string, a value not JSON
 │    └── StateTooLargeError   a commit would take the session's state past its bound
 ├── ModelError                the model could not be called or answered nonsense (not retried:
 │    │                         400/401/403/404, a malformed stream)
 │    ├── ModelRetryableError  429, 5xx, overloaded, connect/read timeouts: retried with backoff
 │    │    └── ModelOverloadedError  429, 503, 529, overloaded/rate-limit errors: a Fallback
 │    │                              model switches to its next model at once
 │    └── ContextLengthError   the conversation no longer fits: compacted, then retried
 ├── SubmissionFailedError     wait() on a submission that settled failed or aborted
 └── SessionBusyError          an erase refused while a turn runs (``force`` aborts it first)

Signals derive from BaseException so that user code catching ``Exception`` in a tool cannot
swallow them: :class:`Suspend` (stop at this step boundary and continue later).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdmissionError",
    "AgentBusyError",
    "AgentMismatchError",
    "AnswerError",
    "BlobCorruptError",
    "BlobTooLargeError",
    "ConfigurationError",
    "ConflictError",
    "ContextLengthError",
    "EditError",
    "ForkPointError",
    "FxDurableError",
    "IllegalTransitionError",
    "InvalidAnswerError",
    "LeaseLostError",
    "MCPConnectError",
    "MCPError",
    "MCPServerLostError",
    "MCPTimeoutError",
    "MCPToolChangedError",
    "MCPToolError",
    "ModelError",
    "ModelOverloadedError",
    "ModelRetryableError",
    "NoPendingQuestionError",
    "PathRefusedError",
    "QueueError",
    "QueueUnavailableError",
    "RecordNotFoundError",
    "RecordedStepError",
    "RequestConflictError",
    "SchemaOutdatedError",
    "SessionBusyError",
    "SessionExistsError",
    "SessionNotFoundError",
    "StateError",
    "StateTooLargeError",
    "SteeringFullError",
    "SteeringPendingError",
    "StepError",
    "StoreError",
    "StoreFullError",
    "StoreUnavailableError",
    "SubagentError",
    "SubmissionFailedError",
    "Suspend",
    "ToolInputError",
    "ToolOutcomeUnknownError",
    "UnknownAgentError",
    "WakeNotSentError",
    "WebhookSignatureError",
    "WorkspaceError",
]


class FxDurableError(Exception):
    """Root of every error fxdurable raises on purpose."""


class ConfigurationError(FxDurableError):
    """A setting, URL or registration is wrong; the message says which and how to fix it."""


class UnknownAgentError(ConfigurationError):
    """The session is bound to an agent this worker does not have. The session is untouched."""

    def __init__(self, session_id: str, agent_name: str, known: list[str]) -> None:
        self.session_id = session_id
        self.agent_name = agent_name
        super().__init__(
            f"session {session_id!r} belongs to agent {agent_name!r}, which this worker does "
            f"not have (it has: {', '.join(sorted(known)) or 'none'}); register that agent "
            "on the worker. The session was left intact."
        )


class StepError(FxDurableError):
    """A durable tool step (``ctx.step``) was misused: its name repeated within one call, its
    value not JSON, or ``ctx.step`` called by a tool not declared ``durable=True``. Raised
    inside the tool, so the call fails and the model reads why."""


class RecordedStepError(FxDurableError):
    """A durable tool step (``ctx.step``) raised on an earlier run of this call, and its error
    could not be raised again as its own class on replay (the class is not loaded in this
    process, or does not take back the arguments it was made with). ``error_type`` names the
    original class (``module.QualName``), ``step`` the step. A step's error that can be
    rebuilt is re-raised as its own class instead, so ``except`` clauses take the same branch
    on replay as on the first run."""

    def __init__(self, message: str, *, step: str, error_type: str) -> None:
        super().__init__(message)
        self.step = step
        self.error_type = error_type


class SubagentError(FxDurableError):
    """A subagent call (``fx.subagent``) did not get its child's final answer: the child
    session failed or was aborted, or its agent is not registered here. Raised inside the
    call, so the call fails and the parent's model reads why; ``child_session`` names the
    child, whose own trace says the rest."""

    def __init__(self, message: str, *, child_session: str | None = None) -> None:
        self.child_session = child_session
        super().__init__(message)


class StateError(FxDurableError):
    """``ctx.state`` was misused: a key that is not a non-empty string, a value that is not
    JSON (the message names the key, never the value), or a write after the call finished.
    Raised at the write, inside the tool: nothing is committed, and if the tool lets it
    propagate the call fails and the model reads why."""


class StateTooLargeError(StateError):
    """Committing a call's state writes would take the session's state past its bound
    (``MAX_STATE_BYTES`` of canonical JSON). Nothing of the commit was written: the call is
    recorded failed with this message (the model reads it), its writes discarded."""

    def __init__(self, size: int, limit: int, keys: list[str]) -> None:
        self.size = size
        self.limit = limit
        self.keys = keys
        super().__init__(
            f"the session's state would be {size} bytes of JSON, over its {limit}-byte bound; "
            f"the writes to {', '.join(repr(k) for k in keys) or 'no key'} were not committed "
            "(delete keys, or keep large data elsewhere and store a reference)"
        )


class AdmissionError(FxDurableError):
    """A submission was not admitted. Nothing was written."""


class AgentBusyError(AdmissionError):
    """``when_busy="reject"`` and the session already has unsettled work."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} is busy with another submission and when_busy='reject' "
            "was given; retry later or submit with when_busy='queue'"
        )


class AgentMismatchError(AdmissionError):
    """An admission named a session that is bound to another agent. Nothing was written."""

    def __init__(self, session_id: str, bound_to: str, asked: str) -> None:
        self.session_id = session_id
        self.bound_to = bound_to
        self.asked = asked
        super().__init__(
            f"session {session_id!r} belongs to agent {bound_to!r}, not {asked!r}; a session "
            "stays bound to the agent that created it: start a new session for this agent"
        )


class SteeringFullError(AdmissionError):
    """The running turn already has as much steering waiting as a session holds; nothing was
    written. It is delivered at the turn's next model call: retry after that."""

    def __init__(self, session_id: str, limit: int) -> None:
        self.session_id = session_id
        self.limit = limit
        super().__init__(
            f"session {session_id!r} already has {limit} steering messages waiting for the "
            "turn's next model call; retry once they are delivered"
        )


class RequestConflictError(AdmissionError):
    """A request id was reused for a different session or prompt. Nothing was written."""


class SessionExistsError(AdmissionError):
    """A fork into a session id that is already taken, by another session or by a fork of
    another source or point. Nothing was written: pick another id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists and is not this fork; fork into a new id"
        )


class ForkPointError(AdmissionError):
    """A fork's ``after=`` is not a point of the source session: an unknown submission, one
    not settled yet, or an event cursor past the last event. Nothing was written."""


class SessionNotFoundError(FxDurableError):
    """No such session, or it belongs to another caller: the two are not told apart, so a
    session id reveals nothing to someone who does not own it."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session {session_id!r}")


class AnswerError(FxDurableError):
    """An answer to a turn's question (``session.answer``) was not recorded. Nothing was
    written, and the question still waits (if one does)."""


class NoPendingQuestionError(AnswerError):
    """The session waits for no answer: nothing was asked, or the question was answered
    already (a repeated answer lands here: the first one is the one applied)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} has no question waiting for an answer (it was never "
            "asked, or it was answered already); read the session's events to see which"
        )


class InvalidAnswerError(AnswerError):
    """The answer cannot apply to the pending question: a ``rewrite`` whose input does not
    validate against the tool's input model, or a ``rewrite`` of a question that is not
    about a tool call. The message says which."""


class StoreError(FxDurableError):
    """The store refused or failed a durable write; the transaction was rolled back."""


class IllegalTransitionError(StoreError):
    """A state machine does not allow this transition."""

    def __init__(self, machine: str, current: object, target: object) -> None:
        self.machine = machine
        self.current = current
        self.target = target
        shown = "(absent)" if current is None else str(current)
        super().__init__(f"illegal {machine} transition {shown} -> {target}")


class ConflictError(StoreError):
    """A record changed under us (its version moved): re-read and decide again."""


class LeaseLostError(StoreError):
    """This worker's lease was taken over; its writes are refused (fencing)."""


class RecordNotFoundError(StoreError):
    """A record the caller relied on does not exist."""


class BlobCorruptError(StoreError):
    """A blob read back from the store does not hash to the digest it is stored under (a
    damaged file, a tampered key, a lost S3 object behind its item): it is never returned."""


class SchemaOutdatedError(StoreError):
    """The store's fxdurable schema (PostgreSQL) or layout (Redis, DynamoDB) is older than
    this code, and a step it lacks is one a worker does not apply on its own: run
    ``fxdurable migrate STORE_URL`` (the message names it; docs/upgrading.md), then open the
    store again. Nothing was written."""


class BlobTooLargeError(FxDurableError):
    """``store.put_blob`` was given more than ``MAX_BLOB_BYTES``
    (:mod:`fxdurable.core.blobs`). Nothing was stored."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"a blob of {size} bytes is over the store's {limit}-byte limit for one blob; "
            "nothing was stored (split the data, or keep it outside the store)"
        )


class StoreUnavailableError(StoreError):
    """The store could not serve the call now: another process held it locked past the busy
    timeout, an I/O error, a server that did not answer. The transaction was rolled back, so
    nothing of the call was written; the same call may succeed later.

    ``where`` names the store (a file path, a host); ``cause`` is the driver's error."""

    def __init__(self, message: str, *, where: str, cause: BaseException | None = None) -> None:
        self.where = where
        self.cause = cause
        super().__init__(message)


class StoreFullError(StoreUnavailableError):
    """The store ran out of space (a full disk, a size limit). The transaction was rolled
    back; what was committed before is intact and readable. Free space, then retry: it lasts
    until then, unlike most unavailability."""


class SteeringPendingError(StoreError):
    """A turn tried to complete while steering waited: it must call the model again.

    Raised inside the runtime (the turn driver catches it and takes another round); a user
    sees it only when calling ``Journal.settle`` directly."""


class QueueError(FxDurableError):
    """A wake could not be sent, or a received message is not a wake. A wake is only a hint
    (DESIGN §1): work it would have announced stays in the store for the reconciliation scan."""


class QueueUnavailableError(QueueError):
    """The queue did not take the wake: unreachable, timed out, throttled or failing. Nothing
    was sent; the same call may succeed later. ``url`` names the queue (never credentials)."""

    def __init__(self, message: str, *, url: str) -> None:
        self.url = url
        super().__init__(message)


class WakeNotSentError(QueueError):
    """A prompt was admitted (durably: ``submission_id`` is in the store) but its wake could
    not be queued. Nothing is lost: a worker's reconciliation scan, or ``fxdurable scan``,
    finds the submission and runs it. Do not submit it again (the same ``request_id`` would
    only find it admitted)."""

    def __init__(self, submission_id: str, cause: str) -> None:
        self.submission_id = submission_id
        super().__init__(
            f"the prompt was admitted (submission {submission_id}) but its wake could not be "
            f"queued ({cause}); nothing is lost: a running `fxdurable worker` (its "
            "reconciliation scan) or `fxdurable scan` will run it once the queue is reachable"
        )


class ToolInputError(FxDurableError):
    """Tool arguments did not validate against the tool's input model."""


class ToolOutcomeUnknownError(FxDurableError):
    """Raised by a tool whose call was cut short after its effect may have started (its
    server went away, no answer in time). The turn settles the call as it settles one a
    timeout interrupted: a ``safe`` call ``cancelled``, any other ``outcome_unknown``, and the
    model is told not to repeat it blindly."""


class MCPError(FxDurableError):
    """An MCP server's tool (:func:`fxdurable.mcp_tools`) could not be used."""


class MCPConnectError(MCPError):
    """The server could not be started or reached, or did not initialize, within the connect
    timeout. Nothing was sent: the call failed without running."""


class MCPToolChangedError(MCPError):
    """The server no longer offers a tool the agent was built with, or offers it with another
    input schema (a redeploy of the server). The call was not sent."""


class MCPToolError(MCPError):
    """The server answered the call with an error (a result with ``isError``, or a JSON-RPC
    error): the call failed, and the model reads the server's message."""


class MCPServerLostError(MCPError, ToolOutcomeUnknownError):
    """The server went away (its process died, the connection dropped) after the call was
    sent and before its answer: the call's outcome is unknown."""


class MCPTimeoutError(MCPError, ToolOutcomeUnknownError):
    """No answer within the call timeout: the server may still be running the call, so its
    outcome is unknown."""


class WorkspaceError(FxDurableError):
    """A workspace tool (:mod:`fxdurable.tools`) could not do what it was asked: a missing
    file, a binary file, an invalid pattern. Raised inside the tool, so the call fails and the
    model reads the message, which says what to do instead."""


class PathRefusedError(WorkspaceError):
    """A path a workspace tool refused: absolute, ``~``, a ``..`` component, a NUL byte,
    empty, too long, reserved (``.fxdurable``), a symlink that leads out of the workspace,
    a special file (FIFO, device, socket), or a write through a symlink. Nothing was read or
    written. ``path`` is the path as given, ``reason`` why it was refused."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        shown = path if len(path) <= 200 else path[:200] + "..."
        super().__init__(
            f"path refused: {shown!r}: {reason}; give a path relative to the workspace root, "
            "e.g. 'src/app.py'"
        )


class EditError(WorkspaceError):
    """``edit_file`` could not apply its edit: ``old_text`` not found, found more than once
    (without ``replace_all``), equal to ``new_text`` or empty; the file missing or not text.
    Nothing was written."""


class ModelError(FxDurableError):
    """The model could not be called, or its answer could not be understood."""


class ModelRetryableError(ModelError):
    """A transient model failure. ``retry_after_s`` is the provider's hint, if it gave one."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class ModelOverloadedError(ModelRetryableError):
    """The provider is overloaded or rate-limits the request (HTTP 429, 503, 529, an
    ``overloaded_error`` / ``rate_limit_error`` in a stream). Retried like any transient
    failure; a :class:`~fxdurable.runtime.models.fallback.Fallback` model answers it by
    switching to its next model instead of waiting."""


class ContextLengthError(ModelError):
    """The request exceeds the model's context window."""


class SubmissionFailedError(FxDurableError):
    """Raised by ``wait()`` when a submission settled ``failed`` or ``aborted``."""

    def __init__(self, submission_id: str, status: str, error: dict[str, Any] | None) -> None:
        self.submission_id = submission_id
        self.status = status
        self.error = error or {}
        reason = self.error.get("message", status)
        super().__init__(f"submission {submission_id} {status}: {reason}")


class Suspend(BaseException):
    """Stop at this step boundary: commit, enqueue a continuation, release the lease.

    ``resume_after_s`` delays the continuation's wake (a model backoff that outlasts the
    invocation); ``attempt_started`` is False when the stop came before the turn began an
    attempt, so there is no attempt to end.
    """

    def __init__(
        self, reason: str, *, resume_after_s: float = 0.0, attempt_started: bool = True
    ) -> None:
        self.reason = reason
        self.resume_after_s = resume_after_s
        self.attempt_started = attempt_started
        super().__init__(reason)


class AttachmentError(FxDurableError, ValueError):
    """An image or a document refused before anything was written: a media type not in
    ``ATTACHMENT_TYPES``, bytes that are not what the type says, past the size limit, a URL
    that is not https, or a stored attachment's blob missing when a turn reads it."""


class WebhookSignatureError(FxDurableError, ValueError):
    """A received settlement webhook whose ``X-Fxdurable-Signature`` is malformed, does
    not match its body, or is too old (``verify_webhook``): do not act on it."""


class SessionBusyError(FxDurableError):
    """An erase refused: the session has a turn queued or running (``force=True`` aborts it
    first). Nothing was erased."""

    def __init__(self, session_id: str, submissions: list[str]) -> None:
        self.session_id = session_id
        self.submissions = submissions
        super().__init__(
            f"session {session_id!r} has unsettled work ({', '.join(submissions)}): abort it "
            "or wait for it to settle, or erase with force=True (--force), which aborts it first"
        )
