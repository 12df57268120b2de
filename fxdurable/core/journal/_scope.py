"""The session row inside one transition: emits events, and is written back once, by the
template (:meth:`~fxdurable.core.journal._base.Transitions._transition`), never by a
transition itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from fxdurable.core.codec import JsonObject
from fxdurable.core.events import SETTLED_OUTCOME, EventType, Payload, StateChanged, payload_data
from fxdurable.core.records import (
    AttachmentRef,
    EventRecord,
    MessageContent,
    MessageRecord,
    SessionRecord,
    ToolCallRequest,
    ToolTaskRecord,
)
from fxdurable.core.retention import stamped
from fxdurable.core.session_state import StateWrites, merged_state
from fxdurable.core.states import SessionStatus, advance
from fxdurable.core.store import Tx

__all__ = ["Written"]


@dataclass(frozen=True, slots=True)
class Written:
    """What a transition's commit left on the session, for the turn it acted on: what the
    driver needs for its next decision, so that no read has to follow the commit."""

    session_version: int  # the session's version as this commit wrote it
    steering: tuple[str, ...]  # still pending on the session
    abort_requested: bool  # the turn's submission carries an abort intent
    # The session's persisted state (``ctx.state``) as this commit left it: what a tool call
    # started by this commit reads, with no read of its own.
    state: JsonObject
    # The session row as this commit wrote it (version included): what the holder's next
    # transition writes from without reading it again (``_held.Held``). None where a test
    # builds a Written by hand.
    session: SessionRecord | None = None
    # The messages this commit appended, in seq order: with the session row, what the
    # holder's next model request is built from without reading them back
    # (runtime/held_view.py).
    messages: tuple[MessageRecord, ...] = ()


class _SessionScope:
    """The session row inside one transaction.

    Opened on the session the transition read (:meth:`open`) or on one it creates
    (:meth:`create`); unopened, nothing is written. Written back once, on :meth:`commit`,
    and only if the transition changed it (an event, a message, a field): a transition
    that only looked writes no session row. ``now`` is read from the clock once, when first
    needed, so a transition that returns early does not consume a timestamp.
    """

    def __init__(self, tx: Tx, clock: Callable[[], float]) -> None:
        self.tx = tx
        self._clock = clock
        self._now: float | None = None
        self._session: SessionRecord | None = None
        self._initial: SessionRecord | None = None
        self._read_version: int | None = None
        self._report_turn: str | None = None
        self._appended: list[MessageRecord] = []
        self.written: Written | None = None

    @property
    def now(self) -> float:
        if self._now is None:
            self._now = self._clock()
        return self._now

    def open(self, session: SessionRecord) -> SessionRecord:
        """Scope the transition to ``session`` as read in this transaction."""
        self._session = self._initial = session
        self._read_version = session.version
        return session

    def create(self, session: SessionRecord) -> None:
        """Scope the transition to a session it creates (written with no expected version),
        in place of any it was opened on (which is then not written)."""
        self._session = session
        self._initial = None
        self._read_version = None

    @property
    def session(self) -> SessionRecord:
        if self._session is None:
            raise RuntimeError("the transition's session scope was never opened")
        return self._session

    @session.setter
    def session(self, session: SessionRecord) -> None:
        self._session = session

    def report(self, turn_id: str) -> None:
        """After the commit, say what it left on the session for turn ``turn_id``
        (:attr:`written`). A turn's id is its submission's (``begin_attempt`` creates it so),
        which is what carries the abort intent."""
        self._report_turn = turn_id

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
        content: MessageContent | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> None:
        s = self.session
        message = MessageRecord(
            session_id=s.id,
            seq=s.next_message_seq,
            turn_id=turn_id,
            role=role,
            text=text,
            round=round_,
            tool_calls=tool_calls,
            summarizes_upto=summarizes_upto,
            interrupted=interrupted,
            content=content,
            attachments=attachments,
            # Every append is followed by its transition's event, in this transaction.
            cursor=s.next_event_seq,
        )
        self.tx.append_message(message)
        self._appended.append(message)
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

    def preview(self, turn_id: str) -> Written:
        """What :meth:`commit` will report for ``turn_id`` if the transition ends now: for a
        step whose commit is shared with the next one (a result and the next intent), the
        decision about the next is made on it, inside the same transaction."""
        new_version = 1 if self._read_version is None else self._read_version + 1
        session = replace(self.session, version=new_version)
        sub = self.tx.get_submission(turn_id)
        return Written(
            session_version=new_version,
            steering=session.steering,
            abort_requested=sub is not None and sub.abort_requested,
            state=session.state,
            session=session,
            messages=tuple(self._appended),
        )

    def commit(self) -> None:
        """Write the session back with its version check, if the transition changed it."""
        if self._session is None or self._session is self._initial:
            return
        new_version = 1 if self._read_version is None else self._read_version + 1
        # When it falls due for the retention sweep, from what this transition left
        # (core/retention.py): stamped here, once, so no transition repeats it.
        self._session = stamped(self._session)
        self.tx.put_session(
            replace(self._session, version=new_version), expected_version=self._read_version
        )
        if self._report_turn is not None:
            self.written = self.preview(self._report_turn)
