"""What every state machine of the journal shares: the frozen results it hands back, the fence, and
the one transition template (:meth:`Transitions._transition`) that owns the preamble of
every durable write: the fence check, the session's version check, the events, the commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, TypeVar, overload

from fxdurable.core.clock import Clock, IdSource
from fxdurable.core.events import EventType, SubmissionAdmitted, TaskRef
from fxdurable.core.records import (
    AttachmentRef,
    AttemptRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
    TurnRecord,
)
from fxdurable.core.states import (
    AttemptStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
    advance,
)
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.errors import (
    ConflictError,
    IllegalTransitionError,
    LeaseLostError,
    RecordNotFoundError,
    SessionNotFoundError,
    StateTooLargeError,
)

from ._gate import HolderGate
from ._held import Held, Overlay, StaleHeld
from ._scope import Written, _SessionScope

T = TypeVar("T")
_R = TypeVar("_R", SubmissionRecord, TurnRecord, ToolTaskRecord)
_Found = TypeVar("_Found")
_Result = TypeVar("_Result")

Outcome = Literal["completed", "failed", "aborted"]
# What a transition run from held records may meet when they are stale (another writer came
# first): the ordinary transition then runs, and raises whatever is real.
_HELD_MISSES = (
    ConflictError,
    IllegalTransitionError,
    LeaseLostError,
    RecordNotFoundError,
    StateTooLargeError,
    StaleHeld,
)
# The budget a submission ran out of, as the submission.interrupted advisory names it.
Exhausted = Literal["attempts_exhausted", "time_exhausted", "budget_exhausted"]


# The erase marker (journal/erase.py): a state key of the session, set by the erase's first
# step (with the blobs it names) and gone with the session. A session holding it is going.
ERASE_KEY = "fx.erase"


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Where a lease holder runs: lets a restarted process take over from its dead self."""

    host: str
    pid: int


@dataclass(frozen=True, slots=True)
class Fence:
    """Proof of ownership presented with every worker write: stale once the token moves on."""

    session_id: str
    owner: str
    token: int


@dataclass(frozen=True, slots=True)
class Named:
    """A transition's session by id, for a caller that holds no lease. ``visible``: a
    session ``owner`` may not see is as absent (:class:`SessionNotFoundError`); otherwise a
    missing one is a :class:`RecordNotFoundError`."""

    session_id: str
    owner: str | None = None
    visible: bool = True


# What the template opens the session scope on: a worker's fence, a session named by id, or
# nothing (the transition creates a session, or opens one it looked for itself).
Access = Fence | Named | None


@dataclass(frozen=True, slots=True)
class AttemptStart:
    """What an attempt starts from: enough for the driver's first decision without a read."""

    submission: SubmissionRecord
    turn: TurnRecord
    attempt: AttemptRecord
    recovered: bool  # a previous attempt of this submission was interrupted (a crash)
    last_call: ModelCallRecord | None = None  # the turn's latest recorded model call
    tasks: tuple[ToolTaskRecord, ...] = ()  # the turn's tool tasks, by (round, index)
    steering: tuple[str, ...] = ()  # pending on the session


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a wake's claim (``claim_wake``) committed, and what it read in the same
    transaction for the wake's first decisions, so that none of it is read again: the
    session's unsettled submissions, oldest first (as they were before ``start`` began the
    first one's attempt), whether a previous owner left an attempt running (the claim is a
    recovery), and the attempt the claim began in its own commit, if it began one."""

    fence: Fence
    unsettled: tuple[SubmissionRecord, ...]
    interrupted: bool
    start: AttemptStart | None = None


@dataclass(frozen=True, slots=True)
class ToolStep:
    """What a tool task's transition (``start_tool``, ``record_step``, ``finish_tool``)
    committed: the task as written, and what the commit left on the session, which is all
    the driver's next decision needs (no read follows the commit)."""

    task: ToolTaskRecord
    written: Written
    # The next call's intent, committed with this step (``start_next``): one commit for a
    # result and the intent after it.
    started: ToolStep | None = None


@dataclass(frozen=True, slots=True)
class StartNext:
    """What a ``start_next`` callback answers: start this call's intent in the same commit.
    ``durable``: its run records its steps (as ``start_tool``'s ``durable``)."""

    task_id: str
    durable: bool = False


@dataclass(frozen=True, slots=True)
class ModelRound:
    """What ``record_model_call`` committed: the tool tasks the response asked for (pending,
    by index), the turn and the model call as written, and what the commit left on the
    session."""

    tasks: tuple[ToolTaskRecord, ...]
    turn: TurnRecord
    model_call: ModelCallRecord
    written: Written
    started: ToolStep | None = None  # its first call's intent, in the same commit


class Transitions:
    """The base of every state machine: the store, the clock, the ids, and the template."""

    def __init__(self, store: Store, clock: Clock, ids: IdSource) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._gate = HolderGate()  # the holder's renewals wait for its transitions (._gate)

    @overload
    def _transition(
        self, access: Access, body: Callable[[Tx, _SessionScope], T], *, held: Held | None = None
    ) -> T: ...

    @overload
    def _transition(
        self,
        access: Access,
        body: Callable[[Tx, _SessionScope], T],
        *,
        then: Callable[[T, Written], _Result],
        held: Held | None = None,
    ) -> _Result: ...

    def _transition(
        self,
        access: Access,
        body: Callable[[Tx, _SessionScope], T],
        *,
        then: Callable[[T, Written], _Result] | None = None,
        held: Held | None = None,
    ) -> T | _Result:
        """Run ``body`` as one atomic transition: the one preamble every write shares.

        In one store transaction (re-run whole on a conflict): the session is read and
        checked (``access``: the fence, which must still hold, raising
        :class:`~fxdurable.errors.LeaseLostError`; or the session by name), ``body`` makes the
        transition through the scope (records, events via ``scope.emit``), and the session
        row is written back once with its version check, which serialises writers on the
        session. ``then`` makes the transition's frozen result from ``body``'s and the
        commit's :class:`Written` for the turn ``body`` reported (``scope.report``).

        ``held``: the records the fence's holder last wrote (:mod:`._held`). The transition
        first runs from them, reading none of them again, its writes fenced by their versions
        in the statements; on a conflict or any refusal (something else wrote the session
        since) it runs again the ordinary way, which reads and checks everything, and raises
        what that raises.

        A fenced transition is counted in this process's :class:`~._gate.HolderGate`: the
        holder's own renewal waits for it before committing."""
        if not isinstance(access, Fence):
            return self._run(access, body, then, None)
        with self._gate.transition(access.session_id):
            if held is not None:
                try:
                    return self._run(access, body, then, held)
                except _HELD_MISSES:
                    pass  # stale: nothing was written; the ordinary transition decides
            return self._run(access, body, then, None)

    def _run(
        self,
        access: Access,
        body: Callable[[Tx, _SessionScope], T],
        then: Callable[[T, Written], _Result] | None,
        held: Held | None,
    ) -> T | _Result:
        runs = 0

        def run(store_tx: Tx) -> T | _Result:
            nonlocal runs
            runs += 1
            if held is not None and runs > 1:
                raise StaleHeld  # the store re-runs bodies on a conflict: the held are stale
            tx = Overlay(store_tx, held)
            scope = _SessionScope(tx, self._clock.now)
            if isinstance(access, Fence):
                scope.open(self._fenced(tx, access))
            elif access is not None:
                found = tx.get_session(access.session_id)
                if access.visible:
                    scope.open(_visible(found, access.session_id, access.owner))
                else:
                    scope.open(_require(found, f"session {access.session_id!r}"))
            result = body(tx, scope)
            scope.commit()
            if then is None:
                return result
            if scope.written is None:  # a reporting transition always emits an event
                raise RuntimeError("the transition reported a turn but wrote no session row")
            return then(result, scope.written)

        return self._store.transact(run)

    # -- checks inside a transaction --------------------------------------------------------

    @staticmethod
    def _fenced(tx: ReadView, fence: Fence) -> SessionRecord:
        session = _require(tx.get_session(fence.session_id), f"session {fence.session_id!r}")
        if session.lease.token != fence.token or session.lease.owner != fence.owner:
            raise LeaseLostError(
                f"lease on session {fence.session_id!r} was taken over (token {fence.token} "
                f"is stale; current {session.lease.token}); this worker may not write"
            )
        return session

    @staticmethod
    def _running_turn(tx: ReadView, fence: Fence, turn_id: str) -> TurnRecord:
        turn = _owned(fence, _require(tx.get_turn(turn_id), f"turn {turn_id!r}"))
        if turn.status != TurnStatus.RUNNING:
            raise IllegalTransitionError("turn", turn.status, "a step of a settled turn")
        return turn

    def _queue_submission(
        self,
        tx: Tx,
        scope: _SessionScope,
        prompt: str,
        *,
        submission_id: str | None = None,
        request: str | None = None,
        trace_parent: str | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> SubmissionRecord:
        """Insert a queued submission at the back of the session's line (inside a tx)."""
        submission_id = submission_id if submission_id is not None else self._ids.new_id("sub")
        request = request if request is not None else self._ids.new_id("req")
        seq = scope.session.next_submission_seq
        submission = SubmissionRecord(
            id=submission_id,
            session_id=scope.session.id,
            seq=seq,
            request_id=request,
            prompt=prompt,
            status=advance("submission", None, SubmissionStatus.QUEUED),
            cursor=scope.session.next_event_seq,
            created_at=scope.now,
            trace_parent=trace_parent,
            attachments=attachments,
        )
        tx.put_submission(submission, expected_version=None)
        scope.session = replace(scope.session, next_submission_seq=seq + 1)
        scope.set_status(SessionStatus.ACTIVE)
        scope.emit(
            EventType.SUBMISSION_ADMITTED,
            SubmissionAdmitted(submission=submission_id, request_id=request),
        )
        return submission


# -- helpers inside a transaction -----------------------------------------------------------


def _visible(session: SessionRecord | None, session_id: str, owner: str | None) -> SessionRecord:
    """The session as ``owner`` may see it: a foreign one is as absent as a missing one, and
    so is one being erased (journal/erase.py: its erase has begun, it is going)."""
    if session is None or ERASE_KEY in session.state:
        raise SessionNotFoundError(session_id)
    if owner is not None and session.owner != owner:
        raise SessionNotFoundError(session_id)
    return session


def _owned(fence: Fence, record: _R) -> _R:
    """A fence covers its own session only: records of other sessions are refused."""
    if record.session_id != fence.session_id:
        raise LeaseLostError(
            f"the lease on session {fence.session_id!r} does not cover a record of "
            f"session {record.session_id!r}"
        )
    return record


def _submission(tx: ReadView, submission_id: str) -> SubmissionRecord:
    return _require(tx.get_submission(submission_id), f"submission {submission_id!r}")


def _task(tx: ReadView, task_id: str) -> ToolTaskRecord:
    return _require(tx.get_tool_task(task_id), f"tool task {task_id!r}")


def _running_attempt(tx: ReadView, submission_id: str) -> AttemptRecord:
    attempts = tx.attempts(submission_id)
    if not attempts or attempts[-1].status != AttemptStatus.RUNNING:
        raise IllegalTransitionError("attempt", attempts[-1].status if attempts else None, "end")
    return attempts[-1]


def _put_submission(tx: Tx, sub: SubmissionRecord) -> None:
    # ``sub`` carries the version that was read; the write bumps it.
    tx.put_submission(replace(sub, version=sub.version + 1), expected_version=sub.version)


def _put_attempt(
    tx: Tx, attempt: AttemptRecord, status: AttemptStatus, reason: str, now: float
) -> None:
    tx.put_attempt(
        replace(
            attempt,
            status=advance("attempt", attempt.status, status),
            ended_at=now,
            reason=reason,
            version=attempt.version + 1,
        ),
        expected_version=attempt.version,
    )


def _put_task(
    tx: Tx,
    task: ToolTaskRecord,
    status: ToolTaskStatus,
    *,
    now: float,
    runs: int | None = None,
    result: str | None = None,
    attachments: tuple[AttachmentRef, ...] = (),
) -> ToolTaskRecord:
    # A status change ends the run the progress belonged to: the result replaces it.
    changes: dict[str, object] = {
        "status": status,
        "updated_at": now,
        "progress": None,
        "progress_at": None,
    }
    if runs is not None:
        changes["runs"] = runs
    if result is not None:
        changes["result"] = result
    if attachments:
        changes["attachments"] = attachments
    updated = dataclasses.replace(task, version=task.version + 1, **changes)  # type: ignore[arg-type]
    tx.put_tool_task(updated, expected_version=task.version)
    return updated


def _task_ref(task: ToolTaskRecord) -> TaskRef:
    return {"task": task.id, "tool": task.tool, "round": task.round, "index": task.index}


def _require(record: _Found | None, what: str) -> _Found:
    if record is None:
        raise RecordNotFoundError(f"no {what}")
    return record
