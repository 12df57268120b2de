"""The journal: every durable write fxdurable can make, as a named transition.

"What can this system write?" is answered by reading this module (DESIGN §2), which is why
it stays one module past the usual size. Each public method is one
atomic store transaction. Methods that act for a worker take its :class:`Fence` and refuse
(:class:`~fxdurable.errors.LeaseLostError`) once another worker has taken the session over.
Every status change goes through :func:`~fxdurable.core.states.advance`, so an illegal
transition raises and the transaction rolls back. Every transition appends to the session's
gap-free event sequence, written in the same transaction as the session row (whose version
check serialises writers on the session).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from fxdurable.core.asking import ANSWER_KINDS, Asked, waits_for_input
from fxdurable.core.clock import Clock, IdSource, execution_id, tool_task_id
from fxdurable.core.codec import JsonObject
from fxdurable.core.crash import crash_point
from fxdurable.core.events import (
    SETTLED_OUTCOME,
    AbortRequested,
    AttemptRun,
    AttemptYielded,
    ContextCompacted,
    EventType,
    InputAnswered,
    InputRequested,
    ModelCallFailed,
    ModelCompleted,
    ModelText,
    Payload,
    SessionCreated,
    StateChanged,
    SteerDelivered,
    SteerDropped,
    SteerRecorded,
    SteerRequeued,
    SubmissionAdmitted,
    SubmissionInterrupted,
    SubmissionSettled,
    TaskRef,
    ToolSettled,
    ToolStarted,
    ToolStepRecorded,
    TurnStarted,
    payload_data,
    settled_event,
    tool_settled_event,
)
from fxdurable.core.fork import ForkPoint, fork_copy, fork_point
from fxdurable.core.records import (
    AttemptRecord,
    ErrorInfo,
    EventRecord,
    InputAnswer,
    InputRequest,
    Lease,
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    StepRecord,
    SubmissionRecord,
    ToolCallRequest,
    ToolTaskRecord,
    TurnRecord,
    Usage,
)
from fxdurable.core.session_state import StateWrites, merged_state
from fxdurable.core.states import (
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
    advance,
    is_terminal,
)
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.core.subagent import child_request_id, child_session_id
from fxdurable.errors import (
    AgentBusyError,
    AgentMismatchError,
    IllegalTransitionError,
    InvalidAnswerError,
    LeaseLostError,
    NoPendingQuestionError,
    RecordNotFoundError,
    RequestConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SteeringFullError,
    SteeringPendingError,
)

__all__ = [
    "MAX_PROGRESS_CHARS",
    "Admission",
    "AttemptStart",
    "Exhausted",
    "Fence",
    "Fork",
    "Journal",
    "Outcome",
    "Receipt",
    "Steering",
    "WorkerIdentity",
]

T = TypeVar("T")
_R = TypeVar("_R", SubmissionRecord, TurnRecord, ToolTaskRecord)
_Found = TypeVar("_Found")

Outcome = Literal["completed", "failed", "aborted"]
# The budget a submission ran out of, as the submission.interrupted advisory names it.
Exhausted = Literal["attempts_exhausted", "time_exhausted"]
# Pending steering lives in the session record, which every step rewrites: a bound keeps a
# step's write small however fast a client steers a turn that is busy in a long tool call.
MAX_PENDING_STEERING = 16
# A running tool task keeps the tail of what it reported (``record_progress``): bounded, so
# a tool that streams megabytes of output costs each progress write the same small record.
MAX_PROGRESS_CHARS = 4096
_SUBMISSION_OUTCOME = {
    "completed": SubmissionStatus.COMPLETED,
    "failed": SubmissionStatus.FAILED,
    "aborted": SubmissionStatus.ABORTED,
}
_TURN_OUTCOME = {
    "completed": TurnStatus.COMPLETED,
    "failed": TurnStatus.FAILED,
    "aborted": TurnStatus.ABORTED,
}


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
class Admission:
    submission: SubmissionRecord
    created: bool  # False: the request id was seen before and this is the same submission


@dataclass(frozen=True, slots=True)
class Steering:
    submission: SubmissionRecord  # the one steered, or the new one the text became
    steered: bool  # False: nothing was in flight, so the text was admitted as a submission
    cursor: int  # the seq of the event that recorded it


@dataclass(frozen=True, slots=True)
class Fork:
    """A session started from another's conversation (:meth:`Journal.fork`)."""

    session_id: str
    source_id: str
    agent: str  # the source's: a fork runs the same agent
    after: int  # the source's event cursor it was copied as of
    messages: int  # how many messages it took
    created: bool  # False: this very fork existed already, and nothing was written


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


@dataclass(slots=True)
class Receipt:
    """Filled in by a step's transition, in its transaction: what the driver needs for its
    next decision, so that no read has to follow the commit (pass one as ``receipt=``)."""

    session_version: int = 0  # the session's version as this commit wrote it
    steering: tuple[str, ...] = ()  # still pending on the session
    abort_requested: bool = False  # the turn's submission carries an abort intent
    turn: TurnRecord | None = None  # the turn as written, when the transition wrote it
    model_call: ModelCallRecord | None = None  # the model call it recorded, if any
    # The session's persisted state (``ctx.state``) as this commit left it: what a tool call
    # started by this commit reads, with no read of its own.
    state: JsonObject | None = None


class _SessionScope:
    """The session row inside one transaction: emits events and is written back once."""

    def __init__(self, tx: Tx, session: SessionRecord, now: float) -> None:
        self.tx = tx
        self._read_version: int | None = session.version
        self.session = session
        self.now = now

    @classmethod
    def new(cls, tx: Tx, session: SessionRecord, now: float) -> _SessionScope:
        scope = cls(tx, session, now)
        scope._read_version = None
        return scope

    def emit(self, type_: EventType, payload: Payload, turn_id: str | None = None) -> None:
        """Append an event; ``payload`` must be the one ``type_`` carries (TypeError)."""
        s = self.session
        self.tx.append_event(
            EventRecord(
                session_id=s.id,
                seq=s.next_event_seq,
                type=type_.value,
                turn_id=turn_id,
                data=payload_data(type_, payload),
                at=self.now,
            )
        )
        outcome = SETTLED_OUTCOME.get(type_, s.last_outcome)
        self.session = replace(
            s, next_event_seq=s.next_event_seq + 1, updated_at=self.now, last_outcome=outcome
        )

    def append_message(
        self,
        turn_id: str,
        role: str,
        text: str,
        *,
        round_: int | None = None,
        tool_calls: tuple[ToolCallRequest, ...] = (),
        summarizes_upto: int | None = None,
        interrupted: bool = False,
    ) -> None:
        s = self.session
        self.tx.append_message(
            MessageRecord(
                session_id=s.id,
                seq=s.next_message_seq,
                turn_id=turn_id,
                role=role,
                text=text,
                round=round_,
                tool_calls=tool_calls,
                summarizes_upto=summarizes_upto,
                interrupted=interrupted,
                # Every append is followed by its transition's event, in this transaction.
                cursor=s.next_event_seq,
            )
        )
        self.session = replace(s, next_message_seq=s.next_message_seq + 1)

    def change_state(
        self,
        writes: StateWrites,
        *,
        task: ToolTaskRecord | None = None,
        step: str | None = None,
    ) -> None:
        """Merge ``writes`` into the session's state as read in this transaction (so a key
        another call committed meanwhile is kept) and announce it: ``state.changed``. Raises
        :class:`~fxdurable.errors.StateTooLargeError` past the bound (the transaction rolls
        back). Nothing to write, nothing written."""
        if not writes:
            return
        state = merged_state(self.session.state, writes)
        self.session = replace(self.session, state=state)
        self.emit(
            EventType.STATE_CHANGED,
            StateChanged(
                set=dict(writes.set),
                deleted=writes.deleted,
                task=None if task is None else task.id,
                tool=None if task is None else task.tool,
                step=step,
            ),
            turn_id=None if task is None else task.turn_id,
        )

    def set_status(self, status: SessionStatus) -> None:
        if status != self.session.status:
            self.session = replace(
                self.session, status=advance("session", self.session.status, status)
            )

    def write(self, receipt: Receipt | None = None, turn_id: str | None = None) -> None:
        """Write the session back; fill ``receipt`` in for the turn ``turn_id``. A turn's id
        is its submission's (``begin_attempt`` creates it so), which is what carries the
        abort intent."""
        new_version = 1 if self._read_version is None else self._read_version + 1
        self.tx.put_session(
            replace(self.session, version=new_version), expected_version=self._read_version
        )
        if receipt is not None and turn_id is not None:
            receipt.session_version = new_version
            receipt.steering = self.session.steering
            receipt.state = self.session.state
            sub = self.tx.get_submission(turn_id)
            receipt.abort_requested = sub is not None and sub.abort_requested


class Journal:
    """Named durable transitions over a :class:`Store`. Synchronous; no I/O besides the store."""

    def __init__(self, store: Store, clock: Clock, ids: IdSource) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids

    @property
    def store_url(self) -> str:
        return self._store.url

    @property
    def store(self) -> Store:
        """The store itself, for what is not a journal transition: a tool's blobs
        (``ctx.store``) and reads outside a turn's records."""
        return self._store

    def read(self, body: Callable[[ReadView], T]) -> T:
        """A read-only snapshot: the only way runtime code looks at the store."""
        return self._store.read(body)

    # -- admission --------------------------------------------------------------------------

    def admit(
        self,
        session_id: str | None,
        *,
        agent: str,
        prompt: str,
        request_id: str | None = None,
        when_busy: Literal["queue", "reject"] = "queue",
        owner: str | None = None,
        new_session_prefix: str = "",
        trace_parent: str | None = None,
    ) -> Admission:
        """Admit a prompt as a queued submission; idempotent on ``request_id``.

        The busy check and the insert are one transaction, so ``when_busy="reject"`` cannot
        race a concurrent admission. ``owner`` is the caller's identity (HTTP): a new session
        records it, an existing one must match it or the session is reported as not found.
        ``None`` is a trusted in-process caller. ``session_id=None`` starts a new session,
        unless ``request_id`` was admitted before: a retry then finds that submission (and
        its session) in the same transaction, however many retries race. A session started
        that way gets a fresh id after ``new_session_prefix`` (HTTP puts it in the caller's
        namespace, ``alice/``: :mod:`fxdurable.http.scoping`).
        ``trace_parent`` (a W3C traceparent) is kept on the submission for its attempts' spans.
        """
        if when_busy not in ("queue", "reject"):
            raise ValueError(f"when_busy must be 'queue' or 'reject', not {when_busy!r}")
        request = request_id or self._ids.new_id("req")
        submission_id = self._ids.new_id("sub")
        new_session_id = session_id or new_session_prefix + self._ids.new_id("ses")

        def body(tx: Tx) -> Admission:
            existing = tx.get_submission_by_request(request)
            if existing is not None:
                asked = existing.session_id if session_id is None else session_id
                if existing.session_id != asked or existing.prompt != prompt:
                    raise RequestConflictError(
                        f"request id {request!r} was already used for another submission "
                        f"(session {existing.session_id!r}); a retry must repeat the same "
                        "session and prompt, new work needs a new request id"
                    )
                self._visible(tx.get_session(asked), asked, owner)
                return Admission(existing, created=False)
            now = self._clock.now()
            session = tx.get_session(new_session_id)
            if session is None:
                scope = _SessionScope.new(
                    tx,
                    SessionRecord(
                        id=new_session_id,
                        agent=agent,
                        owner=owner,
                        status=SessionStatus.IDLE,
                        created_at=now,
                    ),
                    now,
                )
                scope.emit(EventType.SESSION_CREATED, SessionCreated(agent=agent))
            else:
                self._visible(session, new_session_id, owner)
                if session.agent != agent:
                    raise AgentMismatchError(new_session_id, session.agent, agent)
                if when_busy == "reject" and session.status == SessionStatus.ACTIVE:
                    raise AgentBusyError(new_session_id)
                scope = _SessionScope(tx, session, now)
            submission = self._queue_submission(
                tx, scope, submission_id, request, prompt, trace_parent=trace_parent
            )
            scope.write()
            return Admission(submission, created=True)

        admission = self._store.transact(body)
        if admission.created:
            crash_point("submission.after-admit")
        return admission

    def steer(self, session_id: str, text: str, *, owner: str | None = None) -> Steering:
        """Steer the session's current turn, or admit ``text`` when nothing is in flight.

        Steering waits on the session until the turn's next model call, which delivers it
        (DESIGN §3.2). With no unsettled submission, or when the current one is being
        aborted, the text becomes a new queued submission instead: nothing typed is lost.
        """

        def body(tx: Tx) -> Steering:
            session = self._visible(tx.get_session(session_id), session_id, owner)
            scope = _SessionScope(tx, session, self._clock.now())
            unsettled = tx.unsettled_submissions(session_id)
            if unsettled and not unsettled[0].abort_requested:
                current = unsettled[0]
                if len(session.steering) >= MAX_PENDING_STEERING:
                    raise SteeringFullError(session_id, MAX_PENDING_STEERING)
                scope.session = replace(scope.session, steering=(*session.steering, text))
                cursor = scope.session.next_event_seq
                scope.emit(EventType.STEER_RECORDED, SteerRecorded(text=text), turn_id=current.id)
                scope.write()
                return Steering(submission=current, steered=True, cursor=cursor)
            submission = self._queue_submission(
                tx, scope, self._ids.new_id("sub"), self._ids.new_id("req"), text
            )
            scope.write()
            return Steering(submission=submission, steered=False, cursor=submission.cursor)

        steering = self._store.transact(body)
        crash_point("steer.after-record")
        return steering

    def _queue_submission(
        self,
        tx: Tx,
        scope: _SessionScope,
        submission_id: str,
        request: str,
        prompt: str,
        *,
        trace_parent: str | None = None,
    ) -> SubmissionRecord:
        """Insert a queued submission at the back of the session's line (inside a tx)."""
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
        )
        tx.put_submission(submission, expected_version=None)
        scope.session = replace(scope.session, next_submission_seq=seq + 1)
        scope.set_status(SessionStatus.ACTIVE)
        scope.emit(
            EventType.SUBMISSION_ADMITTED,
            SubmissionAdmitted(submission=submission_id, request_id=request),
        )
        return submission

    def request_abort(self, session_id: str) -> list[str]:
        """Record an abort intent on every unsettled submission; returns their ids."""

        def body(tx: Tx) -> list[str]:
            session = self._session(tx, session_id)
            scope = _SessionScope(tx, session, self._clock.now())
            marked = []
            for sub in tx.unsettled_submissions(session_id):
                if not sub.abort_requested:
                    tx.put_submission(
                        replace(sub, abort_requested=True, version=sub.version + 1),
                        expected_version=sub.version,
                    )
                    marked.append(sub.id)
            if marked:
                scope.emit(EventType.ABORT_REQUESTED, AbortRequested(submissions=tuple(marked)))
                if scope.session.steering:
                    # Steering belongs to the turn being aborted: it is dropped with it, and
                    # its text stays in the event log (``steer.recorded``).
                    dropped = len(scope.session.steering)
                    scope.session = replace(scope.session, steering=())
                    scope.emit(EventType.STEER_DROPPED, SteerDropped(count=dropped, reason="abort"))
                scope.write()
            return marked

        marked = self._store.transact(body)
        crash_point("abort.after-intent")
        return marked

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        after: ForkPoint = None,
        owner: str | None = None,
    ) -> Fork:
        """Start session ``new_id`` from ``source_id``'s conversation as it was ``after`` a
        point: a submission id (once it settled), an event cursor (any recorded step), or
        None (everything recorded so far). :mod:`fxdurable.core.fork` says what is copied.

        One transaction: the fork exists whole, at rest, or not at all. It reads the source
        and writes nothing there, so a turn running in the source is not disturbed (only
        what was settled by the point is copied). Idempotent: forking the same source into
        the same id after the same point again returns the fork (``created=False``); any
        other session at ``new_id`` raises :class:`~fxdurable.errors.SessionExistsError`.
        ``owner`` must own the source (else :class:`SessionNotFoundError`) and owns the fork.
        """

        def body(tx: Tx) -> Fork:
            source = self._visible(tx.get_session(source_id), source_id, owner)
            point = fork_point(tx, source, after)
            existing = tx.get_session(new_id)
            if existing is not None:
                created = tx.events(new_id, limit=1)
                data = created[0].data if created else {}
                if (
                    data.get("forked_from") == source_id
                    and data.get("after") == point
                    and existing.owner == source.owner
                ):
                    copied = data.get("messages")
                    n = copied if isinstance(copied, int) else 0
                    return Fork(new_id, source_id, source.agent, point, n, created=False)
                raise SessionExistsError(new_id)
            copy = fork_copy(tx, source, point, new_id)
            now = self._clock.now()
            scope = _SessionScope.new(
                tx,
                SessionRecord(
                    id=new_id,
                    agent=source.agent,
                    owner=source.owner,
                    status=SessionStatus.IDLE,
                    next_message_seq=len(copy.messages) + 1,
                    compacted_upto=copy.compacted_upto,
                    created_at=now,
                ),
                now,
            )
            for message in copy.messages:
                tx.append_message(message)
            for task in copy.tasks:
                tx.put_tool_task(task, expected_version=None)
            scope.emit(
                EventType.SESSION_CREATED,
                SessionCreated(
                    agent=source.agent,
                    forked_from=source_id,
                    after=point,
                    messages=len(copy.messages),
                ),
            )
            # The source's state as of the point, as the fork's own first change: a fork's
            # state is the fold of its events like any session's.
            scope.change_state(StateWrites(set=copy.state))
            crash_point("fork.before-commit")
            scope.write()
            return Fork(new_id, source_id, source.agent, point, len(copy.messages), created=True)

        fork = self._store.transact(body)
        if fork.created:
            crash_point("fork.after-commit")
        return fork

    def admit_child(
        self,
        fence: Fence,
        task_id: str,
        *,
        agent: str,
        prompt: str,
    ) -> Admission:
        """A subagent call's admission (``fx.subagent``): the child session and its one
        submission, both named from the running call's execution id
        (:mod:`fxdurable.core.subagent`), and the call's ``child_session``, in one
        transaction fenced by the parent's lease.

        Idempotent: a re-executed call finds the same submission (``created=False``) and
        writes nothing; if the child is bound to another agent by now (a redeploy),
        :class:`~fxdurable.errors.AgentMismatchError`. The child belongs to the parent's
        owner and records its parent (``parent_session``, ``parent_task`` and its
        ``session.created`` event). A session at the child's id that is not this call's
        child raises :class:`~fxdurable.errors.SessionExistsError`.
        """

        def body(tx: Tx) -> Admission:
            parent = self._fenced(tx, fence)
            task = self._owned(fence, self._task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            if task.status != ToolTaskStatus.RUNNING:
                raise IllegalTransitionError("tool_task", task.status, "a subagent admission")
            child_id = child_session_id(fence.session_id, task.execution_id)
            existing = tx.get_submission_by_request(child_request_id(task.execution_id))
            if existing is not None:
                bound = self._session(tx, child_id).agent
                if bound != agent:  # a redeploy gave the subagent another agent
                    raise AgentMismatchError(child_id, bound, agent)
                return Admission(existing, created=False)
            now = self._clock.now()
            if tx.get_session(child_id) is not None:
                raise SessionExistsError(child_id)
            scope = _SessionScope.new(
                tx,
                SessionRecord(
                    id=child_id,
                    agent=agent,
                    owner=parent.owner,
                    status=SessionStatus.IDLE,
                    parent_session=parent.id,
                    parent_task=task.id,
                    created_at=now,
                ),
                now,
            )
            scope.emit(
                EventType.SESSION_CREATED,
                SessionCreated(agent=agent, parent_session=parent.id, parent_task=task.id),
            )
            submission = self._queue_submission(
                tx, scope, self._ids.new_id("sub"), child_request_id(task.execution_id), prompt
            )
            scope.write()
            tx.put_tool_task(
                replace(task, child_session=child_id, updated_at=now, version=task.version + 1),
                expected_version=task.version,
            )
            return Admission(submission, created=True)

        return self._store.transact(body)

    # -- leases -----------------------------------------------------------------------------

    def claim(
        self,
        session_id: str,
        worker: WorkerIdentity,
        *,
        ttl_s: float,
        holder_is_dead: Callable[[str, int], bool] = lambda host, pid: False,
    ) -> Fence | None:
        """Take the session's lease, or return None while another live owner holds it.

        A lease past its expiry is taken over; so is one whose holder ran on this host in a
        process ``holder_is_dead`` reports gone (a restarted process need not wait it out).
        Each claim bumps the fencing token, which makes every older fence stale.
        """

        def body(tx: Tx) -> Fence | None:
            session = self._session(tx, session_id)
            now = self._clock.now()
            lease = session.lease
            if lease.owner is not None and lease.expires_at > now:
                abandoned = (
                    lease.host == worker.host
                    and lease.pid is not None
                    and lease.pid != worker.pid
                    and holder_is_dead(lease.host, lease.pid)
                )
                if not abandoned:
                    return None
            owner = self._ids.new_id("lease")
            token = lease.token + 1
            new_lease = Lease(
                owner=owner,
                token=token,
                expires_at=now + ttl_s,
                host=worker.host,
                pid=worker.pid,
            )
            tx.put_session(
                replace(session, lease=new_lease, version=session.version + 1),
                expected_version=session.version,
            )
            return Fence(session_id, owner, token)

        return self._store.transact(body)

    def heartbeat(self, fence: Fence, *, ttl_s: float) -> None:
        """Extend the lease; raises LeaseLostError if it was taken over."""

        def body(tx: Tx) -> None:
            session = self._fenced(tx, fence)
            lease = replace(session.lease, expires_at=self._clock.now() + ttl_s)
            tx.put_session(
                replace(session, lease=lease, version=session.version + 1),
                expected_version=session.version,
            )

        self._store.transact(body)

    def release(self, fence: Fence) -> bool:
        """Give the lease up. Returns True when unsettled work remains (enqueue a wake).

        Release and the check for queued work are one transaction: a submission admitted just
        before the release is seen here, so its wake cannot be lost (DESIGN §9). A session
        whose next submission waits for a person's answer has no work a wake could do: the
        answer enqueues the wake.
        """

        def body(tx: Tx) -> bool:
            session = tx.get_session(fence.session_id)
            if session is None or session.lease.token != fence.token:
                return False  # already taken over: the new owner has the work
            if session.lease.owner == fence.owner:
                lease = replace(session.lease, owner=None, expires_at=0.0, host=None, pid=None)
                tx.put_session(
                    replace(session, lease=lease, version=session.version + 1),
                    expected_version=session.version,
                )
            unsettled = tx.unsettled_submissions(fence.session_id)
            return bool(unsettled) and not waits_for_input(unsettled[0])

        return self._store.transact(body)

    # -- attempts and turns -----------------------------------------------------------------

    def begin_attempt(self, fence: Fence, submission_id: str, *, worker: str) -> AttemptStart:
        """Start an attempt; a queued submission starts its turn, a running one resumes it.

        An attempt still ``running`` from before was cut short by a crash: it is recorded
        ``interrupted`` and counts against the submission's attempt budget.
        """

        def body(tx: Tx) -> AttemptStart:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            sub = self._owned(fence, self._submission(tx, submission_id))
            first = tx.unsettled_submissions(fence.session_id)
            if not first or first[0].id != sub.id:
                # Per-session order (DESIGN §3.2): only the oldest unsettled submission runs.
                raise IllegalTransitionError("submission", sub.status, "running out of order")
            if waits_for_input(sub):
                raise IllegalTransitionError("submission", "needs_input", "an attempt unanswered")
            recovered = False
            previous = tx.attempts(submission_id)
            if previous and previous[-1].status == AttemptStatus.RUNNING:
                last = previous[-1]
                self._put_attempt(tx, last, AttemptStatus.INTERRUPTED, "crash", scope.now)
                sub = replace(sub, interruptions=sub.interruptions + 1)
                scope.emit(
                    EventType.ATTEMPT_INTERRUPTED,
                    AttemptRun(number=last.number, worker=last.worker),
                    turn_id=sub.id,
                )
                recovered = True
            turn = tx.get_turn(sub.id)
            if recovered and turn is not None and turn.partial_text:
                turn = self._close_out_partial(tx, scope, turn)
            if sub.status == SubmissionStatus.QUEUED:
                sub = replace(
                    sub,
                    status=advance("submission", sub.status, SubmissionStatus.RUNNING),
                    started_at=scope.now,
                )
                turn = TurnRecord(
                    id=sub.id,
                    session_id=sub.session_id,
                    submission_id=sub.id,
                    status=advance("turn", None, TurnStatus.RUNNING),
                )
                tx.put_turn(turn, expected_version=None)
                scope.append_message(turn.id, "user", sub.prompt)
                scope.emit(EventType.TURN_STARTED, TurnStarted(prompt=sub.prompt), turn_id=turn.id)
            elif sub.status != SubmissionStatus.RUNNING or turn is None:
                raise IllegalTransitionError("submission", sub.status, SubmissionStatus.RUNNING)
            attempt = AttemptRecord(
                submission_id=sub.id,
                number=sub.attempts + 1,
                status=advance("attempt", None, AttemptStatus.RUNNING),
                worker=worker,
                started_at=scope.now,
            )
            tx.put_attempt(attempt, expected_version=None)
            sub = replace(sub, attempts=attempt.number)
            self._put_submission(tx, sub)
            sub = replace(sub, version=sub.version + 1)
            scope.emit(
                EventType.ATTEMPT_STARTED,
                AttemptRun(number=attempt.number, worker=worker),
                turn_id=turn.id,
            )
            scope.write()
            last_call = tx.get_model_call(turn.id, turn.rounds - 1) if turn.rounds else None
            return AttemptStart(
                submission=sub,
                turn=turn,
                attempt=attempt,
                recovered=recovered,
                last_call=last_call,
                tasks=tuple(tx.tool_tasks(turn.id)) if turn.rounds else (),
                steering=scope.session.steering,
            )

        return self._store.transact(body)

    def record_model_call(
        self,
        fence: Fence,
        turn_id: str,
        *,
        round_: int,
        text: str,
        tool_calls: Sequence[ToolCallRequest],
        policies: Sequence[str],
        usage: Usage,
        steering: int = 0,
        stop_reason: str | None = None,
        stop_inferred: bool = False,
        truncated: bool = False,
        receipt: Receipt | None = None,
    ) -> list[ToolTaskRecord]:
        """Record a finished model response with the tool tasks it asked for, atomically.

        ``steering`` counts the pending steering entries the model was shown (the oldest
        first): they become user messages just before the response, in the same commit.
        ``stop_reason`` (verbatim), ``stop_inferred`` and ``truncated`` say how it ended.
        """
        if len(policies) != len(tool_calls):
            raise ValueError("one replay policy per tool call")

        def body(tx: Tx) -> list[ToolTaskRecord]:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            turn = self._running_turn(tx, fence, turn_id)
            if round_ != turn.rounds:
                raise IllegalTransitionError(
                    "model_call", f"round {turn.rounds}", f"round {round_}"
                )
            pending = scope.session.steering
            if not 0 <= steering <= len(pending):
                raise IllegalTransitionError("steering", f"{len(pending)} pending", steering)
            if steering:
                for text_ in pending[:steering]:
                    scope.append_message(turn_id, "user", text_)
                scope.session = replace(scope.session, steering=pending[steering:])
                scope.emit(
                    EventType.STEER_DELIVERED,
                    SteerDelivered(round=round_, count=steering),
                    turn_id=turn_id,
                )
            calls = tuple(tool_calls)
            recorded = ModelCallRecord(
                turn_id=turn_id,
                round=round_,
                status=advance("model_call", None, ModelCallStatus.COMPLETED),
                text=text,
                tool_calls=calls,
                usage=usage,
                stop_reason=stop_reason,
                stop_inferred=stop_inferred,
                truncated=truncated,
                created_at=scope.now,
            )
            tx.insert_model_call(recorded)
            tasks = []
            for index, (call, policy) in enumerate(zip(calls, policies, strict=True)):
                task_id = tool_task_id(turn_id, round_, index)
                task = ToolTaskRecord(
                    id=task_id,
                    session_id=turn.session_id,
                    turn_id=turn_id,
                    round=round_,
                    index=index,
                    tool=call.name,
                    arguments=call.arguments,
                    provider_id=call.provider_id,
                    policy=policy,
                    status=advance("tool_task", None, ToolTaskStatus.PENDING),
                    execution_id=execution_id(task_id),
                    updated_at=scope.now,
                )
                tx.put_tool_task(task, expected_version=None)
                tasks.append(task)
            updated = replace(
                turn, rounds=turn.rounds + 1, partial_text="", version=turn.version + 1
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.append_message(turn_id, "assistant", text, round_=round_, tool_calls=calls)
            scope.emit(
                EventType.MODEL_COMPLETED,
                ModelCompleted(
                    round=round_,
                    text=text,
                    tools=tuple(c.name for c in calls),
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cost_usd=usage.cost_usd,
                    stop_reason=stop_reason,
                    stop_inferred=stop_inferred,
                    truncated=truncated,
                ),
                turn_id=turn_id,
            )
            scope.write(receipt, turn_id)
            if receipt is not None:
                receipt.turn, receipt.model_call = updated, recorded
            return tasks

        return self._store.transact(body)

    def start_tool(
        self,
        fence: Fence,
        task_id: str,
        *,
        reason: str | None = None,
        durable: bool = False,
        receipt: Receipt | None = None,
    ) -> ToolTaskRecord:
        """Record the intent to execute (pending -> running), or a re-execution after a crash.

        ``durable``: this run is of a durable tool, which records its steps (``record_step``).
        An interrupted unsafe call may be re-executed only as a durable run of a call that was
        durable from its first run: its steps are then replayed from their records, not redone.
        """

        def body(tx: Tx) -> ToolTaskRecord:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            task = self._owned(fence, self._task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            if (
                task.status == ToolTaskStatus.RUNNING
                and task.policy == "unsafe"
                and not (durable and task.durable)
            ):
                # Unknown means unknown: an interrupted unsafe call is never re-executed,
                # unless it is durable and its steps were recorded from its first run on.
                raise IllegalTransitionError("tool_task", task.status, "re-run of an unsafe call")
            if durable and not task.durable:  # its steps are recorded from this run on
                task = replace(task, durable=True)
            if task.status == ToolTaskStatus.COMPLETED and task.policy != "safe":
                raise IllegalTransitionError(
                    "tool_task", task.status, f"refresh of a {task.policy} call"
                )
            status = advance("tool_task", task.status, ToolTaskStatus.RUNNING)
            updated = self._put_task(tx, task, status, runs=task.runs + 1, now=scope.now)
            scope.emit(
                EventType.TOOL_STARTED,
                ToolStarted(
                    **_task_ref(task),
                    policy=task.policy,
                    run=updated.runs,
                    execution_id=task.execution_id,
                    reason=reason,
                ),
                turn_id=task.turn_id,
            )
            scope.write(receipt, task.turn_id)
            return updated

        return self._store.transact(body)

    def record_step(
        self,
        fence: Fence,
        task_id: str,
        *,
        name: str,
        value: str,
        writes: StateWrites | None = None,
        receipt: Receipt | None = None,
    ) -> ToolTaskRecord:
        """Record a completed step of a running durable tool call: ``value`` is its result as
        JSON text. Each step name is recorded once per call (IllegalTransitionError).
        ``writes``: the call's ``ctx.state`` writes made before the step returned, committed
        with it (the step's value and its writes are one step)."""

        def body(tx: Tx) -> ToolTaskRecord:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            task = self._owned(fence, self._task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            if task.status != ToolTaskStatus.RUNNING:
                raise IllegalTransitionError("tool_task", task.status, "a step of a call")
            if not task.durable:
                raise IllegalTransitionError("tool_task", "not durable", "a step of a call")
            if any(step.name == name for step in task.steps):
                raise IllegalTransitionError("tool_step", name, "recorded twice")
            step = StepRecord(name=name, value=value, run=task.runs, at=scope.now)
            updated = replace(
                task, steps=(*task.steps, step), updated_at=scope.now, version=task.version + 1
            )
            tx.put_tool_task(updated, expected_version=task.version)
            if writes is not None:
                scope.change_state(writes, task=task, step=name)
            scope.emit(
                EventType.TOOL_STEP,
                ToolStepRecorded(**_task_ref(task), step=name, run=task.runs),
                turn_id=task.turn_id,
            )
            scope.write(receipt, task.turn_id)
            return updated

        return self._store.transact(body)

    def finish_tool(
        self,
        fence: Fence,
        task_id: str,
        status: ToolTaskStatus,
        result: str,
        *,
        writes: StateWrites | None = None,
        receipt: Receipt | None = None,
    ) -> ToolTaskRecord:
        """Settle a tool task; ``result`` is what the model will read for this call.

        ``writes``: the call's ``ctx.state`` writes, committed with its result, and only with
        a ``completed`` one: a call that failed, was cancelled or is unknown never wrote
        (IllegalTransitionError otherwise). Past the state's bound this raises
        :class:`~fxdurable.errors.StateTooLargeError` and writes nothing."""

        def body(tx: Tx) -> ToolTaskRecord:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            task = self._owned(fence, self._task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            target = advance("tool_task", task.status, status)
            if not is_terminal(target):
                raise IllegalTransitionError("tool_task", task.status, target)
            if writes and target != ToolTaskStatus.COMPLETED:
                raise IllegalTransitionError("tool_task", target, "state writes of the call")
            updated = self._put_task(tx, task, target, result=result, now=scope.now)
            if writes is not None:
                # Before the result's event: a fork after the result takes the writes too.
                scope.change_state(writes, task=task)
            scope.emit(
                tool_settled_event(target),
                ToolSettled(**_task_ref(task), result=result),
                turn_id=task.turn_id,
            )
            scope.write(receipt, task.turn_id)
            return updated

        return self._store.transact(body)

    def record_progress(self, fence: Fence, task_id: str, *, run: int, text: str) -> None:
        """Set a running tool task's ``progress`` to ``text`` (its last ``MAX_PROGRESS_CHARS``).

        State, not history: no event, no message, the session record untouched (the commit
        still holds only under the session version the fence was read at). Refused
        (:class:`IllegalTransitionError`) once the task is no longer in run ``run``: a late
        report never lands on a settled task or on a later run's record."""

        def body(tx: Tx) -> None:
            self._fenced(tx, fence)
            task = self._owned(fence, self._task(tx, task_id))
            if task.status != ToolTaskStatus.RUNNING or task.runs != run:
                raise IllegalTransitionError(
                    "tool_task", f"{task.status} (run {task.runs})", f"progress of run {run}"
                )
            tx.put_tool_task(
                replace(
                    task,
                    progress=text[-MAX_PROGRESS_CHARS:],
                    progress_at=self._clock.now(),
                    version=task.version + 1,
                ),
                expected_version=task.version,
            )

        self._store.transact(body)

    def record_model_error(
        self,
        fence: Fence,
        turn_id: str,
        *,
        round_: int,
        error: ErrorInfo,
        backoff_s: Callable[[int], float] | None = None,
    ) -> TurnRecord:
        """Count a transient model failure against the turn's error budget (a retry follows).

        ``backoff_s(failures)`` is how long to wait before that retry, given the turn's count
        of failures including this one; the record keeps when the wait ends
        (``model_retry_at``), so a later invocation or another worker waits out the rest of it
        instead of calling the model again at once.
        """

        def body(tx: Tx) -> TurnRecord:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            turn = self._running_turn(tx, fence, turn_id)
            # The failed stream's text is no answer: the retry streams the round afresh.
            failures = turn.model_errors + 1
            retry_at = scope.now + backoff_s(failures) if backoff_s is not None else None
            updated = replace(
                turn,
                model_errors=failures,
                model_retry_at=retry_at,
                partial_text="",
                version=turn.version + 1,
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.emit(
                EventType.MODEL_ERROR,
                ModelCallFailed(
                    round=round_,
                    code=error.code,
                    message=error.message,
                    errors=updated.model_errors,
                ),
                turn_id=turn_id,
            )
            scope.write()
            return updated

        return self._store.transact(body)

    def record_partial(self, fence: Fence, turn_id: str, *, round_: int, text: str) -> None:
        """Keep streamed text durable before the call is recorded: if the process dies, the
        event log shows what the model had said, and the recovered turn closes it out as an
        interrupted entry the model continues from (``text`` is the stream's next piece)."""

        def body(tx: Tx) -> None:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            turn = self._running_turn(tx, fence, turn_id)
            if round_ != turn.rounds:
                raise IllegalTransitionError(
                    "model_call", f"round {turn.rounds}", f"round {round_}"
                )
            tx.put_turn(
                replace(turn, partial_text=turn.partial_text + text, version=turn.version + 1),
                expected_version=turn.version,
            )
            scope.emit(EventType.MODEL_PARTIAL, ModelText(round=round_, text=text), turn_id=turn_id)
            scope.write()

        self._store.transact(body)

    def record_compaction(
        self,
        fence: Fence,
        turn_id: str,
        *,
        summary: str,
        upto_seq: int,
        model: str,
        usage: Usage,
    ) -> None:
        """Append a summary that stands for every message up to ``upto_seq``; the summary
        call's usage is recorded with it (it is a model call too)."""

        def body(tx: Tx) -> None:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            self._running_turn(tx, fence, turn_id)
            if upto_seq >= scope.session.next_message_seq:
                raise IllegalTransitionError("message", f"seq {upto_seq}", "summary of the future")
            scope.append_message(turn_id, "summary", summary, summarizes_upto=upto_seq)
            scope.session = replace(
                scope.session, compacted_upto=max(scope.session.compacted_upto, upto_seq)
            )
            scope.emit(
                EventType.CONTEXT_COMPACTED,
                ContextCompacted(
                    upto=upto_seq,
                    summary=summary,
                    model=model,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cost_usd=usage.cost_usd,
                ),
                turn_id=turn_id,
            )
            scope.write()

        self._store.transact(body)

    def suspend(self, fence: Fence, submission_id: str, *, reason: str) -> None:
        """End the attempt cleanly at a step boundary; a continuation wake follows."""

        def body(tx: Tx) -> None:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            self._owned(fence, self._submission(tx, submission_id))
            last = self._running_attempt(tx, submission_id)
            self._put_attempt(tx, last, AttemptStatus.YIELDED, reason, scope.now)
            scope.emit(
                EventType.ATTEMPT_YIELDED,
                AttemptYielded(number=last.number, reason=reason),
                turn_id=submission_id,
            )
            scope.write()

        self._store.transact(body)

    def request_input(
        self,
        fence: Fence,
        submission_id: str,
        *,
        question: str,
        about: Asked,
        task_id: str | None = None,
    ) -> SubmissionRecord:
        """The turn asks a person and waits (``needs_input``), in one transaction: the
        question is recorded on the submission (naming the call ``task_id`` it is about, which
        must still be ``pending``: no intent, so nothing can be unknown), and the attempt ends
        ``yielded``: a wait is not an interruption and spends no attempt. The caller then
        lets go of the lease; nothing runs the submission until :meth:`answer_input`."""

        def body(tx: Tx) -> SubmissionRecord:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            sub = self._owned(fence, self._submission(tx, submission_id))
            if sub.status != SubmissionStatus.RUNNING or waits_for_input(sub):
                raise IllegalTransitionError("submission", sub.status, "needs_input")
            task: ToolTaskRecord | None = None
            if about == "tool":
                task = self._owned(fence, self._task(tx, task_id or ""))
                self._running_turn(tx, fence, task.turn_id)
                if task.status != ToolTaskStatus.PENDING or task.answer is not None:
                    raise IllegalTransitionError("tool_task", task.status, "a question")
            last = self._running_attempt(tx, submission_id)
            self._put_attempt(tx, last, AttemptStatus.YIELDED, "needs input", scope.now)
            request = InputRequest(
                question=question,
                about=about,
                task_id=None if task is None else task.id,
                tool=None if task is None else task.tool,
                asked_at=scope.now,
            )
            waiting = replace(sub, input_request=request)
            self._put_submission(tx, waiting)
            scope.emit(
                EventType.ATTEMPT_YIELDED,
                AttemptYielded(number=last.number, reason="needs input"),
                turn_id=submission_id,
            )
            requested = (
                InputRequested(question=question, about=about)
                if task is None
                else InputRequested(question=question, about=about, **_task_ref(task))
            )
            scope.emit(EventType.INPUT_REQUESTED, requested, turn_id=submission_id)
            scope.write()
            return replace(waiting, version=sub.version + 1)

        waiting = self._store.transact(body)
        asked = waiting.input_request
        crash_point("input.after-request", None if asked is None else asked.tool)
        return waiting

    def answer_input(
        self,
        session_id: str,
        kind: str,
        *,
        reason: str | None = None,
        arguments: str | None = None,
        task_id: str | None = None,
        owner: str | None = None,
    ) -> SubmissionRecord:
        """Record the answer to the question the session's next submission waits on; it is
        runnable again (the caller enqueues a wake). Needs no lease: the waiting turn holds
        none, and the session's version check orders this against any other writer.

        ``kind`` is ``allow``, ``deny`` or ``rewrite`` (``arguments``: the call's new input,
        validated by the caller against the tool; it replaces the task's arguments). An answer
        about a call is kept on its task, where the turn applies it instead of asking its hook
        again. ``allow`` of an ``exhausted`` question grants a fresh attempt budget (the
        interruptions count restarts at 0); ``deny`` of it makes the turn settle ``failed``.
        The time the question waited does not count against the turn's time budget.
        ``task_id``: the call the caller validated the answer for; if another question is
        pending now, nothing is written. Raises :class:`NoPendingQuestionError` when nothing
        waits (an answer is applied once: a repeat lands here) and
        :class:`InvalidAnswerError` for an answer that cannot apply to the question."""
        if kind not in ANSWER_KINDS:
            raise InvalidAnswerError(f"an answer is allow, deny or rewrite, not {kind!r}")
        if (kind == "rewrite") != (arguments is not None):
            raise InvalidAnswerError("a rewrite carries the call's new input, and only a rewrite")

        def body(tx: Tx) -> SubmissionRecord:
            session = self._visible(tx.get_session(session_id), session_id, owner)
            scope = _SessionScope(tx, session, self._clock.now())
            unsettled = tx.unsettled_submissions(session_id)
            if not unsettled or not waits_for_input(unsettled[0]):
                raise NoPendingQuestionError(session_id)
            sub = unsettled[0]
            request = sub.input_request
            assert request is not None  # waits_for_input
            if task_id is not None and request.task_id != task_id:
                raise NoPendingQuestionError(session_id)
            answer = InputAnswer(kind=kind, reason=reason, arguments=arguments, at=scope.now)
            if request.about == "tool":
                task = self._task(tx, request.task_id or "")
                if task.status != ToolTaskStatus.PENDING:
                    raise IllegalTransitionError("tool_task", task.status, "an answer")
                tx.put_tool_task(
                    replace(
                        task,
                        answer=answer,
                        arguments=task.arguments if arguments is None else arguments,
                        updated_at=scope.now,
                        version=task.version + 1,
                    ),
                    expected_version=task.version,
                )
            elif kind == "rewrite":
                raise InvalidAnswerError(
                    f"the question of session {session_id!r} is about its spent attempt "
                    "budget, not a tool call: answer allow or deny"
                )
            # The time budget counts the turn's work, not a person's wait: the wait moves the
            # turn's start forward, or a long wait would fail it the moment it resumed.
            waited = max(0.0, scope.now - request.asked_at)
            started = None if sub.started_at is None else sub.started_at + waited
            answered = replace(
                sub, input_request=replace(request, answer=answer), started_at=started
            )
            if request.about == "exhausted" and kind == "allow":
                answered = replace(answered, interruptions=0)
            self._put_submission(tx, answered)
            scope.emit(
                EventType.INPUT_ANSWERED,
                InputAnswered(
                    answer=kind,
                    about=request.about,
                    reason=reason,
                    task=request.task_id,
                    tool=request.tool,
                ),
                turn_id=sub.id,
            )
            scope.write()
            return replace(answered, version=sub.version + 1)

        return self._store.transact(body)

    def settle(
        self,
        fence: Fence,
        submission_id: str,
        outcome: Outcome,
        *,
        text: str | None = None,
        error: ErrorInfo | None = None,
        exhausted: Exhausted | None = None,
    ) -> SubmissionRecord:
        """Give the submission its one terminal outcome, with its turn and attempt.

        Pending tool tasks are cancelled; running ones must have been resolved first (their
        outcome is evidence, not something to discard). The session comes to rest when
        nothing else is unsettled. ``exhausted`` names the budget a ``failed`` submission ran
        out of; if crashes interrupted it, the advisory ``submission.interrupted`` (naming
        the calls left unknown) lands just before ``submission.failed``.
        """

        def body(tx: Tx) -> SubmissionRecord:
            session = self._fenced(tx, fence)
            scope = _SessionScope(tx, session, self._clock.now())
            sub = self._owned(fence, self._submission(tx, submission_id))
            target = advance("submission", sub.status, _SUBMISSION_OUTCOME[outcome])
            steering = scope.session.steering
            if steering and outcome == "completed":
                raise SteeringPendingError(
                    f"submission {submission_id!r} cannot complete: steering arrived after "
                    "the model's answer, so the model must be called again"
                )
            turn = tx.get_turn(submission_id)
            if turn is not None:
                for task in tx.tool_tasks(turn.id):
                    if task.status == ToolTaskStatus.PENDING:
                        self._put_task(
                            tx, task, ToolTaskStatus.CANCELLED, result="cancelled", now=scope.now
                        )
                    elif task.status == ToolTaskStatus.RUNNING:
                        raise IllegalTransitionError("tool_task", task.status, "settled turn")
                tx.put_turn(
                    replace(
                        turn,
                        status=advance("turn", turn.status, _TURN_OUTCOME[outcome]),
                        final_text=text,
                        version=turn.version + 1,
                    ),
                    expected_version=turn.version,
                )
            attempts = tx.attempts(submission_id)
            if attempts and attempts[-1].status == AttemptStatus.RUNNING:
                self._put_attempt(tx, attempts[-1], AttemptStatus.FINISHED, outcome, scope.now)
            settled = replace(
                sub, status=target, result_text=text, error=error, settled_at=scope.now
            )
            self._put_submission(tx, settled)
            if outcome == "failed" and exhausted is not None and sub.interruptions:
                scope.emit(
                    EventType.SUBMISSION_INTERRUPTED,
                    SubmissionInterrupted(
                        submission=sub.id,
                        interruptions=sub.interruptions,
                        unknown_calls=error.unknown_calls if error is not None else (),
                        reason=exhausted,
                    ),
                    turn_id=submission_id,
                )
            scope.emit(
                settled_event(outcome),
                SubmissionSettled(submission=sub.id, text=text, error=error),
                turn_id=submission_id,
            )
            others = [s for s in tx.unsettled_submissions(sub.session_id) if s.id != sub.id]
            if steering:
                # The turn it steered failed before a model call could deliver it: it is
                # queued as a submission of its own rather than lost.
                scope.session = replace(scope.session, steering=())
                requeued = self._queue_submission(
                    tx,
                    scope,
                    self._ids.new_id("sub"),
                    self._ids.new_id("req"),
                    "\n\n".join(steering),
                )
                scope.emit(
                    EventType.STEER_REQUEUED,
                    SteerRequeued(count=len(steering), submission=requeued.id),
                )
            elif not others:
                scope.set_status(SessionStatus.IDLE)
            crash_point("turn.in-commit")
            scope.write()
            return replace(settled, version=sub.version + 1)

        return self._store.transact(body)

    # -- helpers (inside a transaction) -----------------------------------------------------

    @staticmethod
    def _close_out_partial(tx: Tx, scope: _SessionScope, turn: TurnRecord) -> TurnRecord:
        """The dead attempt's streamed text becomes an interrupted assistant entry of its round
        (``model.interrupted``), at most once per round: a later cut of a round already closed
        out asks the model again from the first cut's text. Either way the turn no longer
        holds a partial, so no crash shape leaves the conversation looking mid-stream."""
        round_ = turn.rounds
        # The running turn's messages all lie past the latest compaction (a compaction only
        # covers earlier turns), so the read need not start at the session's first message.
        closed = any(
            m.interrupted and m.turn_id == turn.id and m.round == round_
            for m in tx.messages(turn.session_id, after=scope.session.compacted_upto)
        )
        if not closed:
            scope.append_message(
                turn.id, "assistant", turn.partial_text, round_=round_, interrupted=True
            )
            scope.emit(
                EventType.MODEL_INTERRUPTED,
                ModelText(round=round_, text=turn.partial_text),
                turn_id=turn.id,
            )
        updated = replace(turn, partial_text="", version=turn.version + 1)
        tx.put_turn(updated, expected_version=turn.version)
        return updated

    @staticmethod
    def _visible(
        session: SessionRecord | None, session_id: str, owner: str | None
    ) -> SessionRecord:
        """The session as ``owner`` may see it: a foreign one is as absent as a missing one."""
        if session is None or (owner is not None and session.owner != owner):
            raise SessionNotFoundError(session_id)
        return session

    @staticmethod
    def _session(tx: ReadView, session_id: str) -> SessionRecord:
        return _require(tx.get_session(session_id), f"session {session_id!r}")

    def _fenced(self, tx: Tx, fence: Fence) -> SessionRecord:
        session = self._session(tx, fence.session_id)
        if session.lease.token != fence.token or session.lease.owner != fence.owner:
            raise LeaseLostError(
                f"lease on session {fence.session_id!r} was taken over (token {fence.token} "
                f"is stale; current {session.lease.token}); this worker may not write"
            )
        return session

    @staticmethod
    def _owned(fence: Fence, record: _R) -> _R:
        """A fence covers its own session only: records of other sessions are refused."""
        if record.session_id != fence.session_id:
            raise LeaseLostError(
                f"the lease on session {fence.session_id!r} does not cover a record of "
                f"session {record.session_id!r}"
            )
        return record

    def _running_turn(self, tx: ReadView, fence: Fence, turn_id: str) -> TurnRecord:
        turn = self._owned(fence, self._turn(tx, turn_id))
        if turn.status != TurnStatus.RUNNING:
            raise IllegalTransitionError("turn", turn.status, "a step of a settled turn")
        return turn

    @staticmethod
    def _submission(tx: ReadView, submission_id: str) -> SubmissionRecord:
        return _require(tx.get_submission(submission_id), f"submission {submission_id!r}")

    @staticmethod
    def _turn(tx: ReadView, turn_id: str) -> TurnRecord:
        return _require(tx.get_turn(turn_id), f"turn {turn_id!r}")

    @staticmethod
    def _task(tx: ReadView, task_id: str) -> ToolTaskRecord:
        return _require(tx.get_tool_task(task_id), f"tool task {task_id!r}")

    @staticmethod
    def _running_attempt(tx: ReadView, submission_id: str) -> AttemptRecord:
        attempts = tx.attempts(submission_id)
        if not attempts or attempts[-1].status != AttemptStatus.RUNNING:
            raise IllegalTransitionError(
                "attempt", attempts[-1].status if attempts else None, "end"
            )
        return attempts[-1]

    @staticmethod
    def _put_submission(tx: Tx, sub: SubmissionRecord) -> None:
        # ``sub`` carries the version that was read; the write bumps it.
        tx.put_submission(replace(sub, version=sub.version + 1), expected_version=sub.version)

    @staticmethod
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

    @staticmethod
    def _put_task(
        tx: Tx,
        task: ToolTaskRecord,
        status: ToolTaskStatus,
        *,
        now: float,
        runs: int | None = None,
        result: str | None = None,
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
        updated = dataclasses.replace(task, version=task.version + 1, **changes)  # type: ignore[arg-type]
        tx.put_tool_task(updated, expected_version=task.version)
        return updated


def _task_ref(task: ToolTaskRecord) -> TaskRef:
    return {"task": task.id, "tool": task.tool, "round": task.round, "index": task.index}


def _require(record: _Found | None, what: str) -> _Found:
    if record is None:
        raise RecordNotFoundError(f"no {what}")
    return record
