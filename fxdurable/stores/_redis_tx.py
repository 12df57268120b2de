"""The transaction of the Redis store: WATCHed reads, buffered writes, one commit.

See :mod:`fxdurable.stores.redis` for the key layout and the guarantees; this module is its
private half (the keys and the connection are in :mod:`._redis_wire`), and the path the
store falls back to where the scripted one (:mod:`._redis_cached_tx`) cannot go. A
:class:`RedisTx` lives for one run of one body on one :class:`Link` (a pooled
connection): it WATCHes each key before reading it, caches what it read (a WATCHed value
cannot change without failing the commit), lets reads see the body's own writes, checks
conditional writes against what it read or defers them to ``lua/commit.lua``, and commits
with ``MULTI``/``EVALSHA``/``EXEC`` in one round trip.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, cast

import redis

from fxdurable.core.optimistic import UNKNOWN
from fxdurable.core.recordcodec import decode, encode
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
from fxdurable.stores._by_kind import ByKindTx
from fxdurable.stores._redis_wire import (
    Command,
    Condition,
    Keys,
    Link,
    NoScript,
    Op,
    Rerun,
    Unanswered,
    commit_command,
    commit_outcome,
    new_token,
    raise_errors,
    resend,
    text,
)

__all__ = ["RedisTx"]

R = TypeVar("R")


class _Sequenced(Protocol):
    @property
    def seq(self) -> int: ...


S = TypeVar("S", bound=_Sequenced)


class _Versioned(Protocol):
    @property
    def version(self) -> int: ...


_TASK_ROUND = 1_000_000  # tool task score: round * _TASK_ROUND + index
_UNSETTLED = frozenset({SubmissionStatus.QUEUED, SubmissionStatus.RUNNING})


class RedisTx(ByKindTx):
    """Reads (WATCHed, cached) and buffered writes of one run of one body."""

    def __init__(self, link: Link, keys: Keys, *, writable: bool) -> None:
        self._link = link
        self._k = keys
        self._writable = writable
        # A read() body's first query goes out unwatched: a body that reads once needs no
        # WATCH, no validation and no UNWATCH. A second query re-sends it under WATCH.
        self._first: tuple[list[str], list[Command], list[Any]] | None = None
        self._strings: dict[str, bytes | None] = {}  # string keys as read
        self._decoded: dict[str, object] = {}
        self._fields: dict[tuple[str, str], bytes | None] = {}  # hash fields as read
        self._full: set[str] = set()  # hashes read whole: a field not in _fields is absent
        # The body's writes: reads see these first.
        self._new: dict[str, object] = {}  # string key -> record (p:req: -> submission id)
        self._new_fields: dict[tuple[str, str], object] = {}
        self._scored: dict[tuple[str, str], object] = {}  # zset (key, score) -> id or record
        self._new_tasks: list[str] = []  # task ids inserted, in order
        self._conditions: list[Condition] = []
        self._ops: list[Op] = []
        self.deleted = False  # a delete was buffered: the read cache cannot be advanced

    # -- I/O ----------------------------------------------------------------------------------

    def _query(self, watch: Sequence[str], *commands: Command) -> list[Any]:
        link = self._link
        if not self._writable and not link.watched and self._first is None:
            replies = link.call(commands)
            raise_errors(replies, link.where)
            self._first = (list(watch), list(commands), replies)
            return replies
        keys = list(watch)
        repeat: list[Command] = []
        seen: list[Any] = []
        if self._first is not None:
            first_watch, repeat, seen = self._first
            self._first = None
            keys = first_watch + keys
        new = [k for k in dict.fromkeys(keys) if k not in link.watched]
        head: list[Command] = [("WATCH", *new)] if new else []
        replies = link.call([*head, *repeat, *commands])
        link.watched.update(new)
        raise_errors(replies, link.where)
        replies = replies[len(head) :]
        if repeat:
            if replies[: len(repeat)] != seen:
                raise Rerun  # what the first query saw changed before it was WATCHed
            replies = replies[len(repeat) :]
        return replies

    def _get_strings(self, keys: Sequence[str]) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self._strings]
        if missing:
            (values,) = self._query(missing, ("MGET", *missing))
            self._strings.update(zip(missing, values, strict=True))

    def _stored(self, cls: type[R], key: str) -> R | None:
        raw = self._strings[key]
        if raw is None:
            return None
        record = self._decoded.get(key)
        if record is None:
            record = self._decoded[key] = decode(cls, raw)
        return cast(R, record)

    def _record(self, cls: type[R], key: str) -> R | None:
        if key in self._new:
            return cast(R, self._new[key])
        self._get_strings([key])
        return self._stored(cls, key)

    def _records(self, cls: type[R], keys: Sequence[str]) -> list[R]:
        self._get_strings([k for k in keys if k not in self._new])
        out = []
        for key in dict.fromkeys(keys):
            record = cast(R, self._new[key]) if key in self._new else self._stored(cls, key)
            if record is not None:
                out.append(record)
        return out

    def _ids(self, key: str, *command: str | int) -> list[str]:
        (members,) = self._query([key], command)
        return [text(m) for m in members]

    def _new_of(self, cls: type[R]) -> list[R]:
        return [r for r in self._new.values() if isinstance(r, cls)]

    def _hash(self, cls: type[R], key: str) -> dict[str, R]:
        """Every record of a hash, the body's writes included, by field."""
        if key not in self._full:
            (flat,) = self._query([key], ("HGETALL", key))
            for field, raw in zip(flat[::2], flat[1::2], strict=True):
                self._fields[(key, text(field))] = raw
            self._full.add(key)
        out = {
            field: decode(cls, raw)
            for (hkey, field), raw in self._fields.items()
            if hkey == key and raw is not None
        }
        for (hkey, field), record in self._new_fields.items():
            if hkey == key:
                out[field] = cast(R, record)
        return out

    def _scored_records(self, cls: type[S], key: str, stored: list[bytes], after: int) -> list[S]:
        """Stored zset members plus the body's own appends past ``after``, by score."""
        by_seq: dict[int, S] = {}
        for raw in stored:
            record = decode(cls, raw)
            by_seq[record.seq] = record
        for (zkey, score), mine in self._scored.items():
            if zkey == key and isinstance(mine, cls) and int(score) > after:
                by_seq[int(score)] = mine
        return [by_seq[seq] for seq in sorted(by_seq)]

    # -- reads --------------------------------------------------------------------------------

    def _get_session(self, session_id: str) -> SessionRecord | None:
        return self._record(SessionRecord, self._k.session(session_id))

    def _range_session_all(self) -> Sequence[SessionRecord]:
        ids = self._ids(self._k.sessions, "ZRANGE", self._k.sessions, 0, -1)
        ids += [s.id for s in self._new_of(SessionRecord)]
        records = self._records(SessionRecord, [self._k.session(i) for i in ids])
        return sorted(records, key=lambda s: s.id)

    def _range_session_active(self) -> Sequence[SessionRecord]:
        ids = self._ids(self._k.active, "ZRANGE", self._k.active, 0, -1)
        ids += [s.id for s in self._new_of(SessionRecord)]
        records = self._records(SessionRecord, [self._k.session(i) for i in ids])
        return sorted((s for s in records if s.status == SessionStatus.ACTIVE), key=lambda s: s.id)

    def _range_session_retention(
        self, *, after: int = 0, limit: int | None = None
    ) -> Sequence[SessionRecord]:
        # Earliest due first (the score), only the first ``limit``: the sweep reads what it
        # erases, never every session with a retention.
        if limit == 0:
            return []
        last = -1 if limit is None else limit - 1
        ids = self._ids(self._k.retention, "ZRANGE", self._k.retention, 0, last)
        ids += [s.id for s in self._new_of(SessionRecord)]
        records = self._records(SessionRecord, [self._k.session(i) for i in ids])
        found = sorted(
            (s for s in records if s.retain_until is not None and s.retain_until > after),
            key=lambda s: (s.retain_until, s.id),
        )
        return found if limit is None else found[:limit]

    def _get_submission(self, submission_id: str) -> SubmissionRecord | None:
        return self._record(SubmissionRecord, self._k.sub(submission_id))

    def _by_request(self, request_id: str) -> SubmissionRecord | None:
        key = self._k.req(request_id)
        if key in self._new:
            sub_id = cast(str, self._new[key])
        else:
            self._get_strings([key])
            raw = self._strings[key]
            if raw is None:
                return None
            sub_id = text(raw)
        return self._record(SubmissionRecord, self._k.sub(sub_id))

    def _session_subs(self, index: str, session_id: str) -> list[SubmissionRecord]:
        ids = self._ids(index, "ZRANGE", index, 0, -1)
        ids += [s.id for s in self._new_of(SubmissionRecord) if s.session_id == session_id]
        records = self._records(SubmissionRecord, [self._k.sub(i) for i in ids])
        return sorted((s for s in records if s.session_id == session_id), key=lambda s: s.seq)

    def _range_submission_session(self, session_id: str) -> Sequence[SubmissionRecord]:
        return self._session_subs(self._k.subs(session_id), session_id)

    def _range_submission_unsettled(self, session_id: str) -> Sequence[SubmissionRecord]:
        subs = self._session_subs(self._k.unsettled(session_id), session_id)
        return [s for s in subs if s.status in _UNSETTLED]

    def _range_attempt_submission(self, submission_id: str) -> Sequence[AttemptRecord]:
        records = self._hash(AttemptRecord, self._k.attempts(submission_id))
        return sorted(records.values(), key=lambda a: a.number)

    # Gets no named read makes (the primitives' contract has them): each is the index read
    # it would otherwise take, so it costs that read's one round trip, never a new path.
    def _get_attempt(self, submission_id: str, number: int) -> AttemptRecord | None:
        found = [a for a in self._range_attempt_submission(submission_id) if a.number == number]
        return found[0] if found else None

    def _get_message(self, session_id: str, seq: int) -> MessageRecord | None:
        found = self._range_message_session(session_id, after=seq - 1, limit=1)
        return found[0] if found and found[0].seq == seq else None

    def _get_event(self, session_id: str, seq: int) -> EventRecord | None:
        found = self._range_event_session(session_id, after=seq - 1, limit=1)
        return found[0] if found and found[0].seq == seq else None

    def _get_turn(self, turn_id: str) -> TurnRecord | None:
        return self._record(TurnRecord, self._k.turn(turn_id))

    def _get_model_call(self, turn_id: str, round_: int) -> ModelCallRecord | None:
        key, field = self._k.mcalls(turn_id), str(round_)
        if (key, field) in self._new_fields:
            return cast(ModelCallRecord, self._new_fields[(key, field)])
        if (key, field) not in self._fields and key not in self._full:
            (raw,) = self._query([key], ("HGET", key, field))
            self._fields[(key, field)] = raw
        raw = self._fields.get((key, field))
        return None if raw is None else decode(ModelCallRecord, raw)

    def _range_model_call_turn(self, turn_id: str) -> Sequence[ModelCallRecord]:
        records = self._hash(ModelCallRecord, self._k.mcalls(turn_id))
        return sorted(records.values(), key=lambda c: c.round)

    def _get_tool_task(self, task_id: str) -> ToolTaskRecord | None:
        return self._record(ToolTaskRecord, self._k.task(task_id))

    def _tool_tasks(self, turn_id: str, round_: int | None) -> Sequence[ToolTaskRecord]:
        index = self._k.turn_tasks(turn_id)
        if round_ is None:
            ids = self._ids(index, "ZRANGE", index, 0, -1)
        else:
            low = round_ * _TASK_ROUND
            ids = self._ids(index, "ZRANGEBYSCORE", index, low, low + _TASK_ROUND - 1)
        ids += [t.id for t in self._new_of(ToolTaskRecord) if t.turn_id == turn_id]
        records = self._records(ToolTaskRecord, [self._k.task(i) for i in ids])
        return sorted(
            (t for t in records if t.turn_id == turn_id and (round_ is None or t.round == round_)),
            key=lambda t: (t.round, t.index),
        )

    def _range_submission_request(self, request_id: str) -> Sequence[SubmissionRecord]:
        found = self._by_request(request_id)
        return [] if found is None else [found]

    def _range_tool_task_turn(self, turn_id: str) -> Sequence[ToolTaskRecord]:
        return self._tool_tasks(turn_id, None)

    def _range_tool_task_turn_round(self, turn_id: str, round_: int) -> Sequence[ToolTaskRecord]:
        return self._tool_tasks(turn_id, round_)

    def _range_tool_task_session(self, session_id: str) -> Sequence[ToolTaskRecord]:
        index = self._k.session_tasks(session_id)
        ids = self._ids(index, "LRANGE", index, 0, -1) + self._new_tasks
        records = self._records(ToolTaskRecord, [self._k.task(i) for i in ids])
        return [t for t in records if t.session_id == session_id]

    def _range_message_session(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> Sequence[MessageRecord]:
        key = self._k.messages(session_id)
        page: Command = ("LIMIT", 0, limit) if limit is not None else ()
        (stored,) = self._query([key], ("ZRANGEBYSCORE", key, f"({after}", "+inf", *page))
        return self._scored_records(MessageRecord, key, stored, after)[:limit]

    def _range_event_session(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> Sequence[EventRecord]:
        key = self._k.events(session_id)
        page: Command = ("LIMIT", 0, limit) if limit is not None else ()
        (stored,) = self._query([key], ("ZRANGEBYSCORE", key, f"({after}", "+inf", *page))
        return self._scored_records(EventRecord, key, stored, after)[:limit]

    # -- writes -------------------------------------------------------------------------------

    def _known(self, kind: str, key: str, field: str) -> object:
        """What this transaction knows of a record's current state: the body's own write,
        the stored value it read (WATCHed, so still current at EXEC), None (absent) or
        UNKNOWN."""
        if kind == "k":
            if key in self._new:
                return self._new[key]
            return self._strings.get(key, UNKNOWN)
        if kind == "h":
            if (key, field) in self._new_fields:
                return self._new_fields[(key, field)]
            if (key, field) in self._fields:
                return self._fields[(key, field)]
            return None if key in self._full else UNKNOWN
        return self._scored.get((key, field), UNKNOWN)

    def _check(self, kind: str, key: str, field: str, expected: int | None, what: str) -> None:
        if not self._writable:
            raise TypeError("a read view cannot write: use store.transact(body)")
        state = self._known(kind, key, field)
        if state is UNKNOWN:
            self._conditions.append(Condition(kind, key, field, expected, what))
            return
        if expected is None:
            if state is not None:
                raise ConflictError(f"{what} already exists")
            return
        if state is None:
            raise ConflictError(f"{what} does not exist (expected version {expected})")
        version = (
            json.loads(state)["version"]
            if isinstance(state, bytes)
            else cast(_Versioned, state).version
        )
        if version != expected:
            raise ConflictError(
                f"{what} changed since it was read (expected version {expected}, found {version})"
            )

    def _op(self, command: str, key: str, *args: str | int | float) -> None:
        self._ops.append((command, key, args))

    def _put_session(self, record: SessionRecord, *, expected_version: int | None) -> None:
        key = self._k.session(record.id)
        self._check("k", key, "", expected_version, f"session {record.id!r}")
        self._new[key] = record
        self._op("SET", key, encode(record))
        self._op("ZADD", self._k.sessions, 0, record.id)
        if record.status == SessionStatus.ACTIVE:
            self._op("ZADD", self._k.active, 0, record.id)
        else:
            self._op("ZREM", self._k.active, record.id)
        if record.retain_until is not None:
            self._op("ZADD", self._k.retention, record.retain_until, record.id)
        else:
            self._op("ZREM", self._k.retention, record.id)

    def _put_submission(self, record: SubmissionRecord, *, expected_version: int | None) -> None:
        key = self._k.sub(record.id)
        self._check("k", key, "", expected_version, f"submission {record.id!r}")
        if expected_version is None:
            # Session, seq and request id are fixed at insert (as in the SQLite store).
            req, index, seq = (
                self._k.req(record.request_id),
                self._k.subs(record.session_id),
                str(record.seq),
            )
            self._check("k", req, "", None, f"a submission for request id {record.request_id!r}")
            self._check(
                "z", index, seq, None, f"submission {record.seq} of session {record.session_id!r}"
            )
            self._new[req] = record.id
            self._scored[(index, seq)] = record.id
            self._op("SET", req, record.id)
            self._op("ZADD", index, record.seq, record.id)
        self._new[key] = record
        self._op("SET", key, encode(record))
        unsettled = self._k.unsettled(record.session_id)
        if record.status in _UNSETTLED:
            self._op("ZADD", unsettled, record.seq, record.id)
        else:
            self._op("ZREM", unsettled, record.id)

    def _put_attempt(self, record: AttemptRecord, *, expected_version: int | None) -> None:
        key, field = self._k.attempts(record.submission_id), str(record.number)
        what = f"attempt {record.number} of submission {record.submission_id!r}"
        self._check("h", key, field, expected_version, what)
        self._new_fields[(key, field)] = record
        self._op("HSET", key, field, encode(record))

    def _put_turn(self, record: TurnRecord, *, expected_version: int | None) -> None:
        key = self._k.turn(record.id)
        self._check("k", key, "", expected_version, f"turn {record.id!r}")
        self._new[key] = record
        self._op("SET", key, encode(record))

    def _put_tool_task(self, record: ToolTaskRecord, *, expected_version: int | None) -> None:
        key = self._k.task(record.id)
        self._check("k", key, "", expected_version, f"tool task {record.id!r}")
        if expected_version is None:
            if not (0 <= record.index < _TASK_ROUND and record.round >= 0):
                raise StoreError(f"tool task position out of range: {record.id!r}")
            index = self._k.turn_tasks(record.turn_id)
            score = record.round * _TASK_ROUND + record.index
            what = f"tool task {record.index} of round {record.round} of turn {record.turn_id!r}"
            self._check("z", index, str(score), None, what)
            self._scored[(index, str(score))] = record.id
            self._new_tasks.append(record.id)
            self._op("ZADD", index, score, record.id)
            self._op("RPUSH", self._k.session_tasks(record.session_id), record.id)
        self._new[key] = record
        self._op("SET", key, encode(record))

    def _append_model_call(self, record: ModelCallRecord) -> None:
        key, field = self._k.mcalls(record.turn_id), str(record.round)
        what = f"model call {record.round} of turn {record.turn_id!r}"
        self._check("h", key, field, None, what)
        self._new_fields[(key, field)] = record
        self._op("HSET", key, field, encode(record))

    def _append(self, key: str, record: MessageRecord | EventRecord, what: str) -> None:
        self._check("z", key, str(record.seq), None, what)
        self._scored[(key, str(record.seq))] = record
        self._op("ZADD", key, record.seq, encode(record))

    def _append_message(self, record: MessageRecord) -> None:
        what = f"message {record.seq} of session {record.session_id!r}"
        self._append(self._k.messages(record.session_id), record, what)

    def _append_event(self, record: EventRecord) -> None:
        what = f"event {record.seq} of session {record.session_id!r}"
        self._append(self._k.events(record.session_id), record, what)

    # -- deletes (erasure): each reads the record for the index entries it must remove ----------

    def _del(self, command: str, key: str, *args: str | int | float) -> None:
        if not self._writable:
            raise TypeError("a read view cannot write: use store.transact(body)")
        self.deleted = True
        self._op(command, key, *args)

    def _delete_session(self, session_id: str) -> None:
        self._new.pop(self._k.session(session_id), None)
        self._del("DEL", self._k.session(session_id))
        self._del("ZREM", self._k.sessions, session_id)
        self._del("ZREM", self._k.active, session_id)
        self._del("ZREM", self._k.retention, session_id)

    def _delete_submission(self, submission_id: str) -> None:
        record = self._get_submission(submission_id)
        self._new.pop(self._k.sub(submission_id), None)
        self._del("DEL", self._k.sub(submission_id))
        if record is not None:
            self._del("DEL", self._k.req(record.request_id))
            self._del("ZREM", self._k.subs(record.session_id), submission_id)
            self._del("ZREM", self._k.unsettled(record.session_id), submission_id)

    def _delete_attempt(self, submission_id: str, number: int) -> None:
        self._new_fields.pop((self._k.attempts(submission_id), str(number)), None)
        self._del("HDEL", self._k.attempts(submission_id), str(number))

    def _delete_turn(self, turn_id: str) -> None:
        self._new.pop(self._k.turn(turn_id), None)
        self._del("DEL", self._k.turn(turn_id))

    def _delete_model_call(self, turn_id: str, round_: int) -> None:
        self._new_fields.pop((self._k.mcalls(turn_id), str(round_)), None)
        self._del("HDEL", self._k.mcalls(turn_id), str(round_))

    def _delete_tool_task(self, task_id: str) -> None:
        record = self._get_tool_task(task_id)
        self._new.pop(self._k.task(task_id), None)
        self._del("DEL", self._k.task(task_id))
        if record is not None:
            self._del("ZREM", self._k.turn_tasks(record.turn_id), task_id)
            self._del("LREM", self._k.session_tasks(record.session_id), 0, task_id)

    def _delete_message(self, session_id: str, seq: int) -> None:
        key = self._k.messages(session_id)
        self._scored.pop((key, str(seq)), None)
        self._del("ZREMRANGEBYSCORE", key, seq, seq)

    def _delete_event(self, session_id: str, seq: int) -> None:
        key = self._k.events(session_id)
        self._scored.pop((key, str(seq)), None)
        self._del("ZREMRANGEBYSCORE", key, seq, seq)

    # -- the end of a run ---------------------------------------------------------------------

    @property
    def wrote(self) -> bool:
        """Whether this run has writes to commit (or committed them)."""
        return bool(self._ops)

    def still_current(self) -> bool:
        """Whether everything this run read still holds (one round trip, or none if it
        WATCHed nothing). Asked when the body raised: an error drawn from reads made at
        different moments may be one a serial run would never meet, so the caller runs the
        body again instead of reporting it."""
        link = self._link
        if not link.watched or link.broken:
            return True
        replies = link.call([("MULTI",), ("EXEC",)])
        link.watched.clear()
        raise_errors(replies, link.where)
        return replies[-1] is not None

    def finish(self) -> None:
        """Commit the writes, or validate the reads of a body that wrote nothing."""
        link = self._link
        if not self._ops:
            if not self.still_current():
                raise Rerun
            return
        token = new_token()
        evalsha = commit_command(self._k, self._conditions, self._ops, token=token)
        try:
            _, queued, result = link.call([("MULTI",), evalsha, ("EXEC",)], committing=True)
        except Unanswered as lost:
            # The WATCHes went with the connection and the script's conditions do not carry
            # this body's reads, so the writes cannot be sent again: fence the token off (or
            # learn that the commit landed) and run the body again if it did not.
            fence = commit_command(self._k, [], [], token=token, fence=True)
            commit_outcome(resend(link, fence, lost), self._conditions, link.where)
            return
        link.watched.clear()
        if isinstance(queued, redis.exceptions.NoScriptError):
            raise NoScript
        if result is None:
            raise Rerun
        commit_outcome(
            result[0] if isinstance(result, list) else result, self._conditions, link.where
        )
