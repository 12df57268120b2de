"""The transaction of the DynamoDB store: the store protocol's reads and writes over items.

A :class:`DynamoTx` lives for one run of one body. Its reads go through
:class:`~fxdurable.stores._ddb_reads.Reads` (the cache, then strongly consistent requests);
its writes are buffered as items, each with the condition it needs (see
:mod:`._ddb_commit`, which turns them into one ``TransactWriteItems``). A write to a record
this run knows (it read it, or the cache holds it) is checked here and raises
:class:`~fxdurable.errors.ConflictError` at once; one to a record it does not know carries
its condition to the commit instead (``attribute_not_exists`` for an insert, ``v = :e`` for
an update), so nothing is read just to write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from fxdurable.core.optimistic import UNKNOWN
from fxdurable.core.recordcodec import encode
from fxdurable.core.records import (
    AttemptRecord,
    EventRecord,
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
    TurnRecord,
)
from fxdurable.core.states import SessionStatus, SubmissionStatus
from fxdurable.errors import ConflictError, StoreError
from fxdurable.stores import _ddb_items as keys
from fxdurable.stores._by_kind import ByKindTx
from fxdurable.stores._ddb_items import ACTIVE, RETAIN, SESSIONS, Item, Key
from fxdurable.stores._ddb_reads import Reads

__all__ = ["DynamoTx", "Write"]

R = TypeVar("R")
_UNSETTLED = frozenset({SubmissionStatus.QUEUED, SubmissionStatus.RUNNING})


@dataclass(slots=True)
class Write:
    """One buffered write and the record condition the commit carries for it: ``absent``
    (must not exist), ``expect`` (must be at that version), or neither. ``reread`` marks a
    condition on something this run read absent (its failure means "changed since": run
    again, the fresh run decides)."""

    item: Item | None  # None: delete
    what: str
    absent: bool = False
    expect: int | None = None
    reread: bool = False
    erase: bool = False  # a session head's record removed (its partition version stays)
    # A session head's write: the record it replaces as this run knew it (None: written
    # blind, or new), so the commit can note a lease this store took (Caches.hold).
    replaces: SessionRecord | None = None

    @property
    def conditioned(self) -> bool:
        return self.absent or self.expect is not None


class DynamoTx(ByKindTx):
    """Reads (cached, strongly consistent) and buffered writes of one run of one body."""

    def __init__(self, reads: Reads, *, writable: bool) -> None:
        self.reads = reads
        self._writable = writable
        self.writes: dict[Key, Write] = {}
        # Erasure: the S3 objects of deleted records' offloaded bodies (removed once the
        # commit lands), and the keys deleted (their cached state goes).
        self.dropped_refs: list[str] = []
        self.deleted: list[Key] = []

    # -- reads --------------------------------------------------------------------------------

    def _get(self, cls: type[R], key: Key) -> R | None:
        return self.reads.record(cls, self.reads.item(key))

    def _via(self, cls: type[R], pointer: Key) -> R | None:
        found = self.reads.item(pointer)
        if found is None or found.target is None:
            return None
        return self._get(cls, found.target)

    def _all(
        self, cls: type[R], pk: str, prefix: str, start: str = "", limit: int | None = None
    ) -> list[R]:
        out = []
        for item in self.reads.range(pk, prefix, start, limit):
            record = self.reads.record(cls, item)
            if record is not None:
                out.append(record)
        return out

    def _get_session(self, session_id: str) -> SessionRecord | None:
        return self._get(SessionRecord, keys.session_head(session_id))

    def _indexed(self, index: str) -> list[SessionRecord]:
        ids = [i.sk for i in self.reads.range(index, "")]
        heads = self.reads.heads([keys.session_pk(i) for i in ids])
        records = (self.reads.record(SessionRecord, h) for h in heads.values())
        return sorted((r for r in records if r is not None), key=lambda s: s.id)

    def _range_session_all(self) -> Sequence[SessionRecord]:
        return self._indexed(SESSIONS)

    def _range_session_active(self) -> Sequence[SessionRecord]:
        return [s for s in self._indexed(ACTIVE) if s.status == SessionStatus.ACTIVE]

    def _range_session_retention(
        self, *, after: int = 0, limit: int | None = None
    ) -> Sequence[SessionRecord]:
        # One query of the earliest due, at most ``limit``: never every session.
        ids = [keys.retained_id(i.sk) for i in self.reads.range(RETAIN, "", limit=limit)]
        heads = self.reads.heads([keys.session_pk(i) for i in ids])
        records = (self.reads.record(SessionRecord, h) for h in heads.values())
        found = sorted(
            (
                r
                for r in records
                if r is not None and r.retain_until is not None and r.retain_until > after
            ),
            key=lambda s: (s.retain_until, s.id),
        )
        return found if limit is None else found[:limit]

    def _get_submission(self, submission_id: str) -> SubmissionRecord | None:
        return self._via(SubmissionRecord, keys.pointer("sub", submission_id))

    def _range_submission_request(self, request_id: str) -> Sequence[SubmissionRecord]:
        found = self._via(SubmissionRecord, keys.request(request_id))
        return [] if found is None else [found]

    def _range_submission_session(self, session_id: str) -> Sequence[SubmissionRecord]:
        return self._all(SubmissionRecord, keys.session_pk(session_id), "SUB#")

    def _range_submission_unsettled(self, session_id: str) -> Sequence[SubmissionRecord]:
        subs = self._all(SubmissionRecord, keys.session_pk(session_id), "UNS#")
        return [s for s in subs if s.status in _UNSETTLED]

    def _range_attempt_submission(self, submission_id: str) -> Sequence[AttemptRecord]:
        pk = keys.attempt(submission_id, 0)[0]
        return self._all(AttemptRecord, pk, "AT#")

    def _get_attempt(self, submission_id: str, number: int) -> AttemptRecord | None:
        return self._get(AttemptRecord, keys.attempt(submission_id, number))

    def _get_message(self, session_id: str, seq: int) -> MessageRecord | None:
        return self._get(MessageRecord, keys.message(session_id, seq))

    def _get_event(self, session_id: str, seq: int) -> EventRecord | None:
        return self._get(EventRecord, keys.event(session_id, seq))

    def _get_turn(self, turn_id: str) -> TurnRecord | None:
        return self._via(TurnRecord, keys.pointer("turn", turn_id))

    def _get_model_call(self, turn_id: str, round_: int) -> ModelCallRecord | None:
        return self._get(ModelCallRecord, keys.model_call(turn_id, round_))

    def _range_model_call_turn(self, turn_id: str) -> Sequence[ModelCallRecord]:
        return self._all(ModelCallRecord, keys.model_call(turn_id, 0)[0], "MC#")

    def _get_tool_task(self, task_id: str) -> ToolTaskRecord | None:
        return self._via(ToolTaskRecord, keys.pointer("task", task_id))

    def _tool_tasks(self, turn_id: str, round_: int | None) -> Sequence[ToolTaskRecord]:
        # A turn's tasks live in its session's partition, found by the turn's pointer
        # (written with the turn and with each of its tasks).
        found = self.reads.item(keys.pointer("turn", turn_id))
        if found is None or found.target is None:
            return []
        pk = found.target[0]
        return self._all(ToolTaskRecord, pk, keys.task_prefix(turn_id, round_))

    def _range_tool_task_turn(self, turn_id: str) -> Sequence[ToolTaskRecord]:
        return self._tool_tasks(turn_id, None)

    def _range_tool_task_turn_round(self, turn_id: str, round_: int) -> Sequence[ToolTaskRecord]:
        return self._tool_tasks(turn_id, round_)

    def _range_tool_task_session(self, session_id: str) -> Sequence[ToolTaskRecord]:
        """Ordered by (turn id, round, index): each round's tasks together, in index order."""
        return self._all(ToolTaskRecord, keys.session_pk(session_id), "TASK#")

    def _range_message_session(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> Sequence[MessageRecord]:
        start = keys.message(session_id, after + 1)[1] if after > 0 else ""
        return self._all(MessageRecord, keys.session_pk(session_id), "MSG#", start, limit)

    def _range_event_session(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> Sequence[EventRecord]:
        pk = keys.session_pk(session_id)
        start = keys.event(session_id, after + 1)[1] if after > 0 else ""
        items = self.reads.range(pk, "EV#", start, limit)
        out = [self.reads.record(EventRecord, i) for i in items]
        return [e for e in out if e is not None]

    # -- writes -------------------------------------------------------------------------------

    def _check(self, key: Key, expected: int | None, what: str) -> Write:
        """The write of ``key``: checked now against what this run knows, or carrying its
        condition to the commit."""
        if not self._writable:
            raise TypeError("a read view cannot write: use store.transact(body)")
        state = self.reads.peek(key)
        if state is UNKNOWN:
            return Write(item=None, what=what, absent=expected is None, expect=expected)
        current = state if isinstance(state, Item) and state.body is not None else None
        if expected is None:
            if current is not None:
                raise ConflictError(f"{what} already exists")
        elif current is None:
            raise ConflictError(f"{what} does not exist (expected version {expected})")
        elif current.ver != expected:
            raise ConflictError(
                f"{what} changed since it was read (expected version {expected}, "
                f"found {current.ver})"
            )
        return Write(item=None, what=what)

    def _put(self, key: Key, record: object, version: int | None, write: Write) -> None:
        write.item = Item(pk=key[0], sk=key[1], body=encode(record), ver=version, record=record)
        self._buffer(key, write)

    def _buffer(self, key: Key, write: Write) -> None:
        earlier = self.writes.get(key)
        if earlier is not None and earlier.conditioned and not write.conditioned:
            # The first write of the key in this body carries the condition on what is stored.
            write.absent, write.expect = earlier.absent, earlier.expect
            write.reread = earlier.reread
        self.writes[key] = write
        self.reads.writes[key] = write.item

    def _fixed(self, key: Key, target: Key, what: str, *, unique: bool) -> None:
        """A pointer or request id: written once, never changed. ``unique``: another one
        already there is a conflict (a request id); else it is the same value again."""
        state = self.reads.peek(key)
        if isinstance(state, Item):
            if unique:
                raise ConflictError(f"{what} already exists")
            return
        write = Write(item=Item(pk=key[0], sk=key[1], target=target), what=what)
        if unique:
            write.absent = True
            write.reread = key in self.reads.absent_fixed
        self._buffer(key, write)

    def _put_session(self, record: SessionRecord, *, expected_version: int | None) -> None:
        key = keys.session_head(record.id)
        what = f"session {record.id!r}"
        before = self.reads.peek(key)
        write = self._check(key, expected_version, what)
        was = self.reads.record(SessionRecord, before) if isinstance(before, Item) else None
        write.replaces = was
        self._put(key, record, record.version, write)
        if expected_version is None:
            self._buffer(
                (SESSIONS, record.id), Write(item=Item(pk=SESSIONS, sk=record.id), what=what)
            )
        active = record.status == SessionStatus.ACTIVE
        if was is None or (was.status == SessionStatus.ACTIVE) != active:
            entry = Item(pk=ACTIVE, sk=record.id) if active else None
            self._buffer((ACTIVE, record.id), Write(item=entry, what=what))
        old_due = None if was is None else was.retain_until
        if old_due != record.retain_until:
            if old_due is not None:
                self._buffer(
                    (RETAIN, keys.retain_sk(old_due, record.id)), Write(item=None, what=what)
                )
            if record.retain_until is not None:
                sk = keys.retain_sk(record.retain_until, record.id)
                self._buffer((RETAIN, sk), Write(item=Item(pk=RETAIN, sk=sk), what=what))

    def _put_submission(self, record: SubmissionRecord, *, expected_version: int | None) -> None:
        key = keys.submission(record.session_id, record.seq)
        what = f"submission {record.seq} of session {record.session_id!r}"
        if expected_version is None:
            stored = self.reads.peek(keys.pointer("sub", record.id))
            if isinstance(stored, Item):
                raise ConflictError(f"submission {record.id!r} already exists")
        write = self._check(key, expected_version, what)
        if expected_version is None:
            # Session, seq and request id are fixed at insert (as in the SQLite store).
            self._fixed(
                keys.request(record.request_id),
                key,
                f"a submission for request id {record.request_id!r}",
                unique=True,
            )
            self._fixed(keys.pointer("sub", record.id), key, what, unique=False)
        self._put(key, record, record.version, write)
        shadow = keys.unsettled(record.session_id, record.seq)
        if record.status in _UNSETTLED:
            # A copy, so the queue of a session is one Query of only its unsettled work.
            self._put(shadow, record, record.version, Write(item=None, what=what))
        elif expected_version is not None:
            self._buffer(shadow, Write(item=None, what=what))

    def _put_attempt(self, record: AttemptRecord, *, expected_version: int | None) -> None:
        key = keys.attempt(record.submission_id, record.number)
        what = f"attempt {record.number} of submission {record.submission_id!r}"
        self._put(key, record, record.version, self._check(key, expected_version, what))

    def _put_turn(self, record: TurnRecord, *, expected_version: int | None) -> None:
        key = keys.turn(record.session_id, record.id)
        what = f"turn {record.id!r}"
        write = self._check(key, expected_version, what)
        if expected_version is None:
            self._fixed(keys.pointer("turn", record.id), key, what, unique=False)
        self._put(key, record, record.version, write)

    def _put_tool_task(self, record: ToolTaskRecord, *, expected_version: int | None) -> None:
        if not (record.round >= 0 and record.index >= 0):
            raise StoreError(f"tool task position out of range: {record.id!r}")
        key = keys.task(record.session_id, record.turn_id, record.round, record.index)
        what = f"tool task {record.index} of round {record.round} of turn {record.turn_id!r}"
        if expected_version is None and isinstance(
            self.reads.peek(keys.pointer("task", record.id)), Item
        ):
            raise ConflictError(f"tool task {record.id!r} already exists")
        write = self._check(key, expected_version, what)
        if expected_version is None:
            self._fixed(keys.pointer("task", record.id), key, what, unique=False)
            turn_key = keys.turn(record.session_id, record.turn_id)
            self._fixed(keys.pointer("turn", record.turn_id), turn_key, what, unique=False)
        self._put(key, record, record.version, write)

    def _append_model_call(self, record: ModelCallRecord) -> None:
        key = keys.model_call(record.turn_id, record.round)
        what = f"model call {record.round} of turn {record.turn_id!r}"
        self._put(key, record, None, self._check(key, None, what))

    def _append_message(self, record: MessageRecord) -> None:
        key = keys.message(record.session_id, record.seq)
        what = f"message {record.seq} of session {record.session_id!r}"
        self._put(key, record, None, self._check(key, None, what))

    def _append_event(self, record: EventRecord) -> None:
        key = keys.event(record.session_id, record.seq)
        what = f"event {record.seq} of session {record.session_id!r}"
        self._put(key, record, None, self._check(key, None, what))

    # -- deletes (erasure): unconditional, a missing record is no error -----------------------

    def _drop(self, key: Key, *, head: bool = False) -> None:
        if not self._writable:
            raise TypeError("a read view cannot write: use store.transact(body)")
        found = self.reads.item(key)
        if found is not None and found.ref is not None:
            self.dropped_refs.append(found.ref)
        self.deleted.append(key)
        self._buffer(key, Write(item=None, what=f"erasing {key[0]!r}", erase=head))

    def _drop_via(self, pointer: Key) -> None:
        """The record a pointer names (a turn, a tool task), and the pointer."""
        found = self.reads.item(pointer)
        if found is not None and found.target is not None:
            self._drop(found.target)
        self._drop(pointer)

    def _delete_session(self, session_id: str) -> None:
        record = self._get_session(session_id)
        if record is not None and record.retain_until is not None:
            self._drop((RETAIN, keys.retain_sk(record.retain_until, session_id)))
        self._drop(keys.session_head(session_id), head=True)
        self._drop((SESSIONS, session_id))
        self._drop((ACTIVE, session_id))

    def _delete_submission(self, submission_id: str) -> None:
        pointer = keys.pointer("sub", submission_id)
        record = self._get_submission(submission_id)
        if record is not None:
            self._drop(keys.submission(record.session_id, record.seq))
            self._drop(keys.unsettled(record.session_id, record.seq))
            self._drop(keys.request(record.request_id))
        self._drop(pointer)

    def _delete_attempt(self, submission_id: str, number: int) -> None:
        self._drop(keys.attempt(submission_id, number))

    def _delete_turn(self, turn_id: str) -> None:
        self._drop_via(keys.pointer("turn", turn_id))

    def _delete_model_call(self, turn_id: str, round_: int) -> None:
        self._drop(keys.model_call(turn_id, round_))

    def _delete_tool_task(self, task_id: str) -> None:
        self._drop_via(keys.pointer("task", task_id))

    def _delete_message(self, session_id: str, seq: int) -> None:
        self._drop(keys.message(session_id, seq))

    def _delete_event(self, session_id: str, seq: int) -> None:
        self._drop(keys.event(session_id, seq))
