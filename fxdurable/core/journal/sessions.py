"""Sessions: steering a running turn, aborting it, forking a conversation, and a subagent
call's child session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from fxdurable.core.codec import JsonObject
from fxdurable.core.crash import crash_point
from fxdurable.core.events import (
    AbortRequested,
    EventType,
    SessionCreated,
    SteerDropped,
    SteerRecorded,
)
from fxdurable.core.fork import ForkPoint, fork_copy, fork_point
from fxdurable.core.notify import publish
from fxdurable.core.records import SessionRecord, SubmissionRecord
from fxdurable.core.session_state import StateWrites
from fxdurable.core.states import SessionStatus, ToolTaskStatus
from fxdurable.core.store import Tx
from fxdurable.core.subagent import child_request_id, child_session_id
from fxdurable.errors import (
    AgentMismatchError,
    IllegalTransitionError,
    SessionExistsError,
    SteeringFullError,
)

from ._base import Fence, Named, Transitions, _owned, _require, _task, _visible
from ._scope import _SessionScope
from .admission import Admission

# Pending steering lives in the session record, which every step rewrites: a bound keeps a
# step's write small however fast a client steers a turn that is busy in a long tool call.
MAX_PENDING_STEERING = 16


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


class Sessions(Transitions):
    def steer(self, session_id: str, text: str, *, owner: str | None = None) -> Steering:
        """Steer the session's current turn, or admit ``text`` when nothing is in flight.

        Steering waits on the session until the turn's next model call, which delivers it
        (DESIGN §3.2). With no unsettled submission, or when the current one is being
        aborted, the text becomes a new queued submission instead: nothing typed is lost.
        """

        def body(tx: Tx, scope: _SessionScope) -> Steering:
            session = scope.session
            unsettled = tx.unsettled_submissions(session_id)
            if unsettled and not unsettled[0].abort_requested:
                current = unsettled[0]
                if len(session.steering) >= MAX_PENDING_STEERING:
                    raise SteeringFullError(session_id, MAX_PENDING_STEERING)
                scope.session = replace(scope.session, steering=(*session.steering, text))
                cursor = scope.session.next_event_seq
                scope.emit(EventType.STEER_RECORDED, SteerRecorded(text=text), turn_id=current.id)
                return Steering(submission=current, steered=True, cursor=cursor)
            submission = self._queue_submission(tx, scope, text)
            return Steering(submission=submission, steered=False, cursor=submission.cursor)

        steering = self._transition(Named(session_id, owner), body)
        crash_point("steer.after-record")
        if steering.steered:  # the holder cuts a streaming reply short (core/notify.py)
            publish(self._store, session_id)
        return steering

    def update_state(
        self,
        session_id: str,
        update: Callable[[JsonObject], StateWrites],
        *,
        owner: str | None = None,
    ) -> JsonObject:
        """A write to the session's state (``ctx.state``) made by a person between calls, not
        by a tool: ``update`` is shown the state as read in this transaction and returns what
        to write (read-modify-write under the session's version, re-run whole on a conflict).
        Announced by ``state.changed`` (no task, no turn); returns the state as committed."""

        def body(tx: Tx, scope: _SessionScope) -> JsonObject:
            scope.change_state(update(scope.session.state))
            return scope.session.state

        return self._transition(Named(session_id, owner), body)

    def request_abort(self, session_id: str) -> list[str]:
        """Record an abort intent on every unsettled submission; returns their ids."""

        def body(tx: Tx, scope: _SessionScope) -> list[str]:
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
            return marked

        marked = self._transition(Named(session_id, visible=False), body)
        crash_point("abort.after-intent")
        if marked:  # the holder cancels the running call now (core/notify.py)
            publish(self._store, session_id)
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

        def body(tx: Tx, scope: _SessionScope) -> Fork:
            source = _visible(tx.get_session(source_id), source_id, owner)
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
            scope.create(
                SessionRecord(
                    id=new_id,
                    agent=source.agent,
                    owner=source.owner,
                    status=SessionStatus.IDLE,
                    next_message_seq=len(copy.messages) + 1,
                    compacted_upto=copy.compacted_upto,
                    created_at=scope.now,
                )
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
            # The last step of the body: the template's commit follows.
            crash_point("fork.before-commit")
            return Fork(new_id, source_id, source.agent, point, len(copy.messages), created=True)

        fork = self._transition(None, body)
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

        def body(tx: Tx, scope: _SessionScope) -> Admission:
            # Fenced by the parent's lease (the template's check), but the session the
            # transition writes is the child: the scope moves to it, and the parent, unchanged,
            # is not written.
            parent = scope.session
            task = _owned(fence, _task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            if task.status != ToolTaskStatus.RUNNING:
                raise IllegalTransitionError("tool_task", task.status, "a subagent admission")
            child_id = child_session_id(fence.session_id, task.execution_id)
            existing = tx.get_submission_by_request(child_request_id(task.execution_id))
            if existing is not None:
                bound = _require(tx.get_session(child_id), f"session {child_id!r}").agent
                if bound != agent:  # a redeploy gave the subagent another agent
                    raise AgentMismatchError(child_id, bound, agent)
                return Admission(existing, created=False)
            if tx.get_session(child_id) is not None:
                raise SessionExistsError(child_id)
            now = scope.now
            scope.create(
                SessionRecord(
                    id=child_id,
                    agent=agent,
                    owner=parent.owner,
                    status=SessionStatus.IDLE,
                    parent_session=parent.id,
                    parent_task=task.id,
                    created_at=now,
                )
            )
            scope.emit(
                EventType.SESSION_CREATED,
                SessionCreated(agent=agent, parent_session=parent.id, parent_task=task.id),
            )
            submission = self._queue_submission(
                tx, scope, prompt, request=child_request_id(task.execution_id)
            )
            tx.put_tool_task(
                replace(task, child_session=child_id, updated_at=now, version=task.version + 1),
                expected_version=task.version,
            )
            return Admission(submission, created=True)

        return self._transition(fence, body)
