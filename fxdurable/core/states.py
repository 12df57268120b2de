"""Every state machine of the durable core, as explicit transition tables.

A status changes only through :func:`advance`, which looks the pair up in the machine's
table and raises :class:`~fxdurable.errors.IllegalTransitionError` otherwise. The journal calls
it inside a store transaction, so an illegal transition rolls the whole transaction back.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

from fxdurable.errors import IllegalTransitionError

__all__ = [
    "TRANSITIONS",
    "AttemptStatus",
    "ModelCallStatus",
    "SessionStatus",
    "SubmissionStatus",
    "ToolTaskStatus",
    "TurnStatus",
    "advance",
    "is_terminal",
]


class SessionStatus(StrEnum):
    IDLE = "idle"  # at rest: nothing unsettled
    ACTIVE = "active"  # at least one unsettled submission


class SubmissionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


class AttemptStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"  # the submission settled during this attempt
    YIELDED = "yielded"  # stopped cleanly at a step boundary (deadline, shutdown)
    INTERRUPTED = "interrupted"  # found still running by a later owner: a crash


class TurnStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"


class ModelCallStatus(StrEnum):
    # A model call is recorded only once its finish part is seen (DESIGN §3.4); an unrecorded
    # call is simply made again, so there is no durable "requested" state to leave behind.
    COMPLETED = "completed"
    FAILED = "failed"


class ToolTaskStatus(StrEnum):
    PENDING = "pending"  # asked for by a recorded model call; intent not yet committed
    RUNNING = "running"  # intent committed: the effect may be happening or have happened
    COMPLETED = "completed"
    FAILED = "failed"  # the tool raised: the model reads the error
    CANCELLED = "cancelled"
    OUTCOME_UNKNOWN = "outcome_unknown"
    REFUSED = "refused"  # a blind repeat of an unknown call, refused once


S = SessionStatus
Sub = SubmissionStatus
A = AttemptStatus
T = TurnStatus
M = ModelCallStatus
K = ToolTaskStatus

# ``None`` is "no record yet": the allowed first states of each machine.
TRANSITIONS: Mapping[str, Mapping[StrEnum | None, frozenset[StrEnum]]] = {
    "session": {
        None: frozenset({S.IDLE, S.ACTIVE}),
        S.IDLE: frozenset({S.ACTIVE}),
        S.ACTIVE: frozenset({S.IDLE}),
    },
    "submission": {
        None: frozenset({Sub.QUEUED}),
        Sub.QUEUED: frozenset({Sub.RUNNING, Sub.ABORTED}),
        # running -> failed/aborted/completed; never back to queued: a continuation keeps it
        # running and starts a new attempt.
        Sub.RUNNING: frozenset({Sub.COMPLETED, Sub.FAILED, Sub.ABORTED}),
        Sub.COMPLETED: frozenset(),
        Sub.FAILED: frozenset(),
        Sub.ABORTED: frozenset(),
    },
    "attempt": {
        None: frozenset({A.RUNNING}),
        A.RUNNING: frozenset({A.FINISHED, A.YIELDED, A.INTERRUPTED}),
        A.FINISHED: frozenset(),
        A.YIELDED: frozenset(),
        A.INTERRUPTED: frozenset(),
    },
    "turn": {
        None: frozenset({T.RUNNING}),
        T.RUNNING: frozenset({T.COMPLETED, T.FAILED, T.ABORTED}),
        T.COMPLETED: frozenset(),
        T.FAILED: frozenset(),
        T.ABORTED: frozenset(),
    },
    "model_call": {
        None: frozenset({M.COMPLETED, M.FAILED}),
        M.COMPLETED: frozenset(),
        M.FAILED: frozenset(),
    },
    "tool_task": {
        None: frozenset({K.PENDING}),
        # pending -> failed: arguments that do not validate, an unknown tool, a hook's denial;
        # nothing was executed.
        K.PENDING: frozenset({K.RUNNING, K.FAILED, K.CANCELLED, K.REFUSED}),
        # running -> running is a re-execution after a crash (safe, or idempotent with the
        # same execution id); the event log records each one.
        K.RUNNING: frozenset({K.RUNNING, K.COMPLETED, K.FAILED, K.CANCELLED, K.OUTCOME_UNKNOWN}),
        # A completed *safe* call with reuse=False is run again when a recovered turn
        # re-enters its round, so the model reads the world as it is now.
        K.COMPLETED: frozenset({K.RUNNING}),
        K.FAILED: frozenset(),
        K.CANCELLED: frozenset(),
        K.OUTCOME_UNKNOWN: frozenset(),
        K.REFUSED: frozenset(),
    },
}

# Keyed by (enum class, value): StrEnum members of different machines compare equal as
# strings ("completed"), and must not be confused.
_TERMINAL: frozenset[tuple[type[StrEnum], str]] = frozenset(
    (type(status), status.value)
    for status in (
        Sub.COMPLETED,
        Sub.FAILED,
        Sub.ABORTED,
        A.FINISHED,
        A.YIELDED,
        A.INTERRUPTED,
        T.COMPLETED,
        T.FAILED,
        T.ABORTED,
        K.COMPLETED,
        K.FAILED,
        K.CANCELLED,
        K.OUTCOME_UNKNOWN,
        K.REFUSED,
        M.COMPLETED,
        M.FAILED,
    )
)
_ENUMS: Mapping[str, type[StrEnum]] = {
    "session": SessionStatus,
    "submission": SubmissionStatus,
    "attempt": AttemptStatus,
    "turn": TurnStatus,
    "model_call": ModelCallStatus,
    "tool_task": ToolTaskStatus,
}

E = TypeVar("E", bound=StrEnum)


def advance(machine: str, current: StrEnum | None, target: E) -> E:
    """Return ``target`` if ``machine`` allows ``current -> target``; raise otherwise."""
    enum = _ENUMS[machine]
    if not isinstance(target, enum) or not (current is None or isinstance(current, enum)):
        raise IllegalTransitionError(machine, current, target)
    allowed = TRANSITIONS[machine].get(current)
    if allowed is None or target not in allowed:
        raise IllegalTransitionError(machine, current, target)
    return target


def is_terminal(status: StrEnum) -> bool:
    """A settled status: nothing recorded in it is ever re-done (reuse=False aside)."""
    return (type(status), status.value) in _TERMINAL
