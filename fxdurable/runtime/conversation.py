"""The session's conversation held in memory, so a model step reads only what is new.

A :class:`Conversation` holds what the model is sent: the latest compaction summary, the
messages after it and their rounds' tool tasks, with a *cursor* (the last message seq held)
and the session *version* it was last verified at. Messages are append-only, so bringing it up
to date reads only the messages past the cursor, the tool tasks of their rounds and those of
rounds still open (a task not yet settled); an unchanged session version reads nothing at all.
A cold load starts at the latest summary (``SessionRecord.compacted_upto``), never at seq 0.

A :class:`ConversationCache` (LRU) keeps conversations across the steps of a run and across
later wakes in the same warm process. A held conversation is trusted only while every write
to the session's messages and tasks since it was synced was this process's: the lease's
fencing token tells (a claim by anyone else bumps it in between). Anything else — another
owner, a store that went back, a recovery that re-runs settled reads (``reuse=False``), a
summary that does not extend the last one — drops it and reloads from the records.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from fxdurable.core.records import MessageRecord, SessionRecord, ToolTaskRecord
from fxdurable.core.states import is_terminal
from fxdurable.core.store import ReadView
from fxdurable.runtime.held_view import NeedsRead
from fxdurable.runtime.history import History, build_history
from fxdurable.runtime.models.base import ChatMessage

__all__ = ["Conversation", "ConversationCache"]

_Round = tuple[str, int]  # (turn_id, round)


class _Stale(Exception):
    """The held conversation cannot be brought up to date by reading forward: reload."""


class Conversation:
    """What the model is sent for one session, as of ``cursor`` and ``version``."""

    def __init__(self, session_id: str, token: int) -> None:
        self.session_id = session_id
        self.token = token  # the lease token it was last synced under
        self.version = 0  # the session version it was verified at (0: never)
        self.cursor = 0  # the last message seq held
        self._summary: MessageRecord | None = None
        self._messages: list[MessageRecord] = []  # past the summary's cutoff, no summaries
        self._tasks: dict[_Round, list[ToolTaskRecord]] = {}
        self._open: set[_Round] = set()  # rounds with a task not yet settled
        self._chat: list[ChatMessage] = []  # built once for the closed prefix of _messages
        self._built = 0  # how many of _messages _chat covers
        self._chat_stored = False  # whether _chat holds a stored attachment (History's flag)

    @classmethod
    def load(cls, view: ReadView, session: SessionRecord, token: int) -> Conversation:
        """Read the latest summary and what came after it, with their tool tasks."""
        conversation = cls(session.id, token)
        messages = view.messages(session.id, after=session.compacted_upto)
        turns = dict.fromkeys(m.turn_id for m in messages if m.tool_calls)
        if session.compacted_upto:
            # Only the turns since the summary: one read each, however long the session.
            tasks = [task for turn_id in turns for task in view.tool_tasks(turn_id)]
        else:
            # Nothing compacted: the model is sent every task, so read them in one go.
            tasks = list(view.session_tool_tasks(session.id))
        for task in tasks:
            conversation._tasks.setdefault((task.turn_id, task.round), []).append(task)
        conversation._append(messages)
        conversation._open = {k for k, ts in conversation._tasks.items() if _any_open(ts)}
        conversation.version = session.version
        return conversation

    def sync(
        self, view: ReadView, session: SessionRecord, known: Sequence[ToolTaskRecord] = ()
    ) -> None:
        """Read what is newer than the cursor; raises :class:`_Stale` when that cannot do.
        ``known`` are tool tasks as the caller's own commits just wrote them: their round is
        taken from them instead of read again."""
        if session.version == self.version:
            return
        if session.version < self.version or session.next_message_seq <= self.cursor:
            raise _Stale("the session went back")
        new = view.messages(self.session_id, after=self.cursor)
        changed = set(self._open)
        changed.update((m.turn_id, m.round or 0) for m in new if m.tool_calls)
        given: dict[_Round, list[ToolTaskRecord]] = {}
        for task in known:
            given.setdefault((task.turn_id, task.round), []).append(task)
        # Every read before any change: a read that fails (a held view's NeedsRead, a lost
        # connection) leaves the conversation as it was.
        read = {key: given[key] if key in given else list(view.tool_tasks(*key)) for key in changed}
        self._tasks.update(read)
        self._append(new)
        self._open = {key for key in changed if _any_open(self._tasks[key])}
        self.version = session.version

    def history(self) -> History:
        """What :func:`build_history` makes of the held records, building only the tail."""
        closed = self._built
        for message in self._messages[self._built :]:
            if message.tool_calls and not message.interrupted and self._round_open(message):
                break
            closed += 1
        if closed > self._built:
            built = self._build(self._messages[self._built : closed])
            self._chat += built.messages
            self._chat_stored = self._chat_stored or built.stored_attachments
            self._built = closed
        tail = self._build(self._messages[self._built :])
        summary = self._summary.text if self._summary is not None else None
        return History(
            summary=summary,
            messages=[*self._chat, *tail.messages],
            stored_attachments=self._chat_stored or tail.stored_attachments,
        )

    # -- helpers ---------------------------------------------------------------------------

    def _append(self, messages: Sequence[MessageRecord]) -> None:
        compacted = False
        for message in messages:
            self.cursor = max(self.cursor, message.seq)
            if message.role != "summary":
                self._messages.append(message)
                continue
            upto = message.summarizes_upto or 0
            if self._summary is not None and upto < (self._summary.summarizes_upto or 0):
                raise _Stale("a summary that covers less than the one before it")
            self._summary = message
            kept = [m for m in self._messages if m.seq > upto]
            if len(kept) != len(self._messages):
                self._messages, self._chat, self._built = kept, [], 0
                self._chat_stored = False
                compacted = True
        if compacted:
            live = {(m.turn_id, m.round or 0) for m in self._messages if m.tool_calls}
            for key in [k for k in self._tasks if k not in live]:
                del self._tasks[key]  # their messages were compacted away

    def _round_open(self, message: MessageRecord) -> bool:
        return (message.turn_id, message.round or 0) in self._open or not self._tasks.get(
            (message.turn_id, message.round or 0)
        )

    def _build(self, messages: Sequence[MessageRecord]) -> History:
        rounds = {(m.turn_id, m.round or 0) for m in messages if m.tool_calls}
        tasks = [t for key in rounds for t in self._tasks.get(key, ())]
        return build_history(messages, tasks)


class ConversationCache:
    """The conversations of the last ``size`` sessions this process ran, least recent out.

    Safe to use from the worker threads journal reads run in: a conversation is taken out
    while it is brought up to date, so a failed read leaves nothing half-updated behind.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._held: OrderedDict[str, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def conversation(
        self,
        view: ReadView,
        session: SessionRecord,
        token: int,
        known: Sequence[ToolTaskRecord] = (),
    ) -> Conversation:
        """The session's conversation, up to date with ``view``, for the lease ``token``.
        ``known``: a whole round's tool tasks as the caller just committed them (see
        :meth:`Conversation.sync`)."""
        with self._lock:
            held = self._held.pop(session.id, None)
        current: Conversation | None = None
        # Our own token, or the next one with nobody else's claim in between.
        if held is not None and held.token <= token <= held.token + 1:
            try:
                held.sync(view, session, known)
                current = held
            except _Stale:
                current = None
            except NeedsRead:
                # A held view could not answer; the conversation is unchanged: keep it for
                # the read from the store that follows.
                with self._lock:
                    self._held.setdefault(session.id, held)
                raise
        if current is None:
            current = Conversation.load(view, session, token)
        current.token = token
        with self._lock:
            self._held[session.id] = current
            while len(self._held) > self._size:
                self._held.popitem(last=False)
        return current

    def drop(self, session_id: str) -> None:
        """Forget the session: its next read loads from the records."""
        with self._lock:
            self._held.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._held)


def _any_open(tasks: Sequence[ToolTaskRecord]) -> bool:
    return any(not is_terminal(t.status) for t in tasks)
