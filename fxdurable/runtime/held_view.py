"""The next model request built from what the driver's own commits wrote, with no read.

After a tool result commits, the driver holds the session row that commit wrote and the
messages its commits appended (:class:`~fxdurable.runtime.turn_state.TurnState`). A held
conversation (runtime/conversation.py) needs nothing else to be brought up to date: the
messages past its cursor, and the tool tasks of the round, which the caller passes as
``known`` anyway. :class:`HeldView` answers those reads from memory, and refuses
(:class:`NeedsRead`) every read it cannot prove complete, so the caller reads the store instead.

Why the held session may stand in for a fresh read: the commit that wrote it was fenced by
the session's version (core/journal/_held.py), so it already saw every earlier write of
anyone else (a steer, an answer, an abort) or ran the ordinary transition that read them. A
write that lands after that commit is one a read made an instant later would also have
missed: it is seen at the next boundary, as DESIGN §3.2 states for a steer.

Why the messages are complete: messages are append-only and numbered without gaps from the
session's ``next_message_seq``. The held messages answer ``messages(after=n)`` only when they
hold every seq from ``n + 1`` to the session's last; a message anyone else appended leaves a
gap (or a seq past what is held), and the store is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from fxdurable.core.records import MessageRecord, SessionRecord, ToolTaskRecord

__all__ = ["HeldView", "NeedsRead"]


class NeedsRead(Exception):
    """The held records cannot answer this read: read the store."""


class HeldView:
    """The few reads a held conversation's update makes, answered from the holder's records.

    ``session``: the session row as the holder's latest commit wrote it. ``messages``: the
    messages its latest commits appended, oldest first. ``known``: tool tasks as its commits
    wrote them (the round's); any other round's tasks are refused.
    """

    def __init__(
        self,
        session: SessionRecord,
        messages: Sequence[MessageRecord],
        known: Sequence[ToolTaskRecord] = (),
    ) -> None:
        self._session = session
        self._messages = messages
        self._rounds = {(t.turn_id, t.round) for t in known}
        self._known = known

    def get_session(self, session_id: str) -> SessionRecord | None:
        if session_id != self._session.id:
            self._refuse(f"session {session_id!r}")
        return self._session

    def messages(self, session_id: str, after: int = 0) -> Sequence[MessageRecord]:
        if session_id != self._session.id:
            self._refuse(f"messages of {session_id!r}")
        newer = [m for m in self._messages if m.seq > after]
        last = self._session.next_message_seq - 1
        # Every seq from after + 1 to last, in order: checked over what is held (a few
        # messages), never over the range, which a far-behind cursor makes long.
        complete = len(newer) == last - after and all(
            m.seq == after + 1 + i for i, m in enumerate(newer)
        )
        if not complete:
            self._refuse(f"messages after {after} (held: {[m.seq for m in newer]}, last {last})")
        return newer

    def tool_tasks(self, turn_id: str, round_: int | None = None) -> Sequence[ToolTaskRecord]:
        if round_ is None or (turn_id, round_) not in self._rounds:
            self._refuse(f"tool tasks of {turn_id!r} round {round_}")
        found = [t for t in self._known if t.turn_id == turn_id and t.round == round_]
        return sorted(found, key=lambda t: t.index)

    def __getattr__(self, name: str) -> Any:
        # Every other read (a cold load's session_tool_tasks, an attachment's blob): the store.
        def refused(*args: object, **kwargs: object) -> NoReturn:
            self._refuse(name)

        return refused

    @staticmethod
    def _refuse(what: str) -> NoReturn:
        raise NeedsRead(what)
