"""The scripted transaction of the Redis store: cached reads, one ``EVALSHA`` to commit.

A :class:`CachedTx` runs a body against the store's read cache (:mod:`._redis_cache`): a
read a session's cache can answer costs nothing, a miss costs one round trip
(``lua/read.lua``, which returns the session's version with the reply, and re-reads the
version of every session the body used so far). Its writes are buffered as in
:class:`~fxdurable.stores._redis_tx.RedisTx`, whose write half it shares. The commit is one
``EVALSHA`` of ``lua/commit.lua`` carrying every precondition: the version of each session
the body read (so no key of those sessions changed since), the raw value of anything read
that no session owns (a request id), and the record conditions of writes the body made
blind; then every write, and each touched session's version bumped. A moved version reruns
the body from fresh reads (the store bounds the runs); a failed record condition raises
:class:`~fxdurable.errors.ConflictError`. A stale fencing token needs nothing more: the
session record is read under its version, so a rerun sees the new token and the journal
raises :class:`~fxdurable.errors.LeaseLostError`. A body that writes nothing ends with one
round trip that checks the versions it used, unless its last fetch already confirmed them.

Round trips, with the session's cache warm (the previous step's commit leaves it so): a
transition is 1 (its commit); a read is 1 (the version check, or a miss that brings it), 0
for the lease holder's first read of its session after its own commit
(:meth:`CachedTx._own_snapshot`).
Cold (another store wrote the session, or a first touch): one more per query of the body
that misses, as many as the body has dependent reads (a transition's are 1 to 3).

What a script cannot re-check cheaply (:class:`~fxdurable.stores._redis_cache.Unsupported`):
reads of the store-wide indexes (``list_sessions``, ``active_sessions``) and of the attempts
or tool-task index of a record that does not exist. A body that makes one runs on the
WATCH/MULTI path instead (:class:`~fxdurable.stores._redis_tx.RedisTx`), with its costs.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fxdurable.core.recordcodec import decode
from fxdurable.core.records import MessageRecord, ModelCallRecord, SessionRecord
from fxdurable.errors import ConflictError
from fxdurable.stores._redis_cache import (
    Caches,
    Fetched,
    SessionCache,
    Unsupported,
    fetch,
)
from fxdurable.stores._redis_tx import RedisTx
from fxdurable.stores._redis_wire import (
    Command,
    Condition,
    Keys,
    Link,
    Rerun,
    Unanswered,
    commit_command,
    commit_outcome,
    new_token,
    resend,
    text,
)

__all__ = ["CachedTx"]

R = TypeVar("R")
T = TypeVar("T")


class CachedTx(RedisTx):
    """One run of one body over the read cache; commits with one script."""

    def __init__(self, link: Link, keys: Keys, caches: Caches, *, writable: bool) -> None:
        super().__init__(link, keys, writable=writable)
        self._caches = caches
        self._used: dict[str, int] = {}  # session -> the version whose state the body read
        self._confirmed: set[str] = set()  # sessions the latest fetch re-read the version of
        self._raw: list[Condition] = []  # reads no session owns, as the commit re-checks them
        self._raw_stale = False  # some of them came from an earlier fetch than the latest

    # -- the cache and the server -------------------------------------------------------------

    def _use(self, key: str, take: Callable[[SessionCache], T | None]) -> T | None:
        """What the cache of ``key``'s session holds for it, at the version this run uses."""
        with self._caches.lock:
            sid = self._caches.session_of(key)
            cache = None if sid is None else self._caches.get(sid)
            if sid is None or cache is None or self._used.get(sid, cache.version) != cache.version:
                return None
            found = take(cache)
            if found is not None:
                self._used[sid] = cache.version
            return found

    def _fetch(self, commands: Sequence[Command]) -> list[Fetched]:
        """One round trip: the reads, and the version of every session used so far."""
        confirm: list[tuple[tuple[str, str] | None, Command | None]] = [
            (("s", sid), None) for sid in self._used
        ]
        if self._raw:
            self._raw_stale = True
        reads = [(self._k.owner(str(c[1])), c) for c in commands]
        replies = fetch(self._link, self._k, [*confirm, *reads])
        for sid, version, _ in replies:
            if sid is None or version is None:
                continue
            if self._used.setdefault(sid, version) != version:
                with self._caches.lock:
                    self._caches.at(sid, version)  # what this store held is out of date
                raise Rerun  # the session moved on since this run read it
        self._confirmed = set(self._used)
        return replies[len(confirm) :]

    def _keep(self, fetched: Fetched, key: str, store: Callable[[SessionCache], None]) -> bool:
        """Keep what was fetched for ``key`` in its session's cache; False if no session
        owns it (the caller records how the commit re-checks it)."""
        sid, version, _ = fetched
        if sid is None or version is None:
            return False
        with self._caches.lock:
            if self._k.owner(key) == ("o", key):
                self._caches.learn(key, sid)
            cache = self._caches.at(sid, version)
            if cache is not None:
                store(cache)
        return True

    def _unowned(self, kind: str, key: str, field: str, raw: bytes | None) -> None:
        self._raw.append(Condition(kind, key, field, raw, f"{key} {field}".strip()))

    def _query(self, watch: Sequence[str], *commands: Command) -> list[Any]:
        """Reads this class does not cache (events): fetched, with their session's version."""
        if any(self._k.owner(str(c[1])) is None for c in commands):
            raise Unsupported
        return [reply for _, _, reply in self._fetch(commands)]

    # -- reads --------------------------------------------------------------------------------

    def _get_strings(self, keys: Sequence[str]) -> None:
        missing = []
        for key in dict.fromkeys(keys):
            if key in self._strings:
                continue
            hit = self._use(key, _string_of(key))
            if hit is None:
                missing.append(key)
                continue
            self._strings[key] = hit[0]
            if hit[1] is not None:
                self._decoded[key] = hit[1]
        if not missing:
            return
        for key, fetched in zip(missing, self._fetch([("GET", k) for k in missing]), strict=True):
            raw = fetched[2]
            self._strings[key] = raw
            if not self._keep(fetched, key, _set_string(key, raw)):
                self._unowned("r", key, "", raw)

    def _stored(self, cls: type[R], key: str) -> R | None:
        record = super()._stored(cls, key)
        if record is not None and key not in self._new:
            self._use(
                key, lambda c: c.decoded.setdefault(key, record) if key in c.strings else None
            )
        return record

    def _hash(self, cls: type[R], key: str) -> dict[str, R]:
        if key not in self._full:
            held = self._use(key, lambda c: dict(c.fields[key]) if key in c.full else None)
            if held is None:
                if self._k.owner(key) is None:
                    raise Unsupported
                (fetched,) = self._fetch([("HGETALL", key)])
                flat = fetched[2]
                held = {text(f): raw for f, raw in zip(flat[::2], flat[1::2], strict=True)}

                def store(cache: SessionCache, fields: dict[str, bytes | None] = held) -> None:
                    cache.fields[key] = dict(fields)
                    cache.full.add(key)

                if not self._keep(fetched, key, store):
                    raise Unsupported  # the index of a record that does not exist
            for field, raw in held.items():
                self._fields[(key, field)] = raw
            self._full.add(key)
        return super()._hash(cls, key)

    def _get_model_call(self, turn_id: str, round_: int) -> ModelCallRecord | None:
        key, field = self._k.mcalls(turn_id), str(round_)
        known = (key, field) in self._new_fields or (key, field) in self._fields
        if not known and key not in self._full:
            held = self._use(
                key,
                lambda c: (c.fields[key].get(field),) if field in c.fields.get(key, {}) else None,
            )
            if held is None:
                (fetched,) = self._fetch([("HGET", key, field)])
                raw = fetched[2]
                held = (raw,)

                def store(cache: SessionCache) -> None:
                    cache.fields.setdefault(key, {})[field] = raw

                if not self._keep(fetched, key, store):
                    self._unowned("f", key, field, raw)
            self._fields[(key, field)] = held[0]
        return super()._get_model_call(turn_id, round_)

    def _members(self, key: str, command: Command, after: float = 0) -> list[tuple[float, bytes]]:
        """A zset's (score, member) with score > ``after`` (0: all of it) or a list's
        (position, member), from what the cache holds or fetched with ``command``."""
        low = after if after > 0 else -math.inf

        def take(cache: SessionCache) -> list[tuple[float, bytes]] | None:
            held = cache.members.get(key)
            since = cache.since.get(key, -math.inf)
            if held is None or since > low:
                return None
            start = bisect.bisect_right(held, low, key=_score)
            if low > since:
                # A reader past a cursor holds what came before it: let it go, so what the
                # store holds of a long session does not grow with it.
                for _, member in held[:start]:
                    cache.memo.pop(member, None)
                del held[:start]
                cache.since[key] = low
                start = 0
            return held[start:]

        held = self._use(key, take)
        if held is not None:
            return held
        if self._k.owner(key) is None:
            raise Unsupported  # a store-wide index: the script would re-read it whole
        (fetched,) = self._fetch([command])
        flat = fetched[2]
        if command[0] == "LRANGE":
            members = [(float(i), m) for i, m in enumerate(flat)]
        else:
            members = [(float(s), m) for m, s in zip(flat[::2], flat[1::2], strict=True)]

        def store(cache: SessionCache) -> None:
            cache.members[key] = list(members)
            if low > -math.inf:
                cache.since[key] = low
            else:
                cache.since.pop(key, None)

        if not self._keep(fetched, key, store):
            raise Unsupported  # the index of a record that does not exist
        return members

    def _ids(self, key: str, *command: str | int) -> list[str]:
        name = command[0]
        if name == "LRANGE":
            members = self._members(key, ("LRANGE", key, 0, -1))
        else:
            members = self._members(key, ("ZRANGE", key, 0, -1, "WITHSCORES"))
        if name == "ZRANGEBYSCORE":
            low, high = float(command[2]), float(command[3])
            members = [m for m in members if low <= m[0] <= high]
        return [text(m) for _, m in members]

    def _range_message_session(
        self, session_id: str, *, after: int = 0, limit: int | None = None
    ) -> Sequence[MessageRecord]:
        key = self._k.messages(session_id)
        if after > 0:
            members = self._members(
                key, ("ZRANGEBYSCORE", key, f"({after}", "+inf", "WITHSCORES"), after
            )
        else:
            members = self._members(key, ("ZRANGE", key, 0, -1, "WITHSCORES"))
        with self._caches.lock:
            cache = self._caches.get(session_id)
            memo: dict[bytes, object] = cache.memo if cache is not None else {}
        by_seq: dict[int, MessageRecord] = {}
        for _, raw in members:
            record = memo.get(raw)
            if not isinstance(record, MessageRecord):
                record = memo[raw] = decode(MessageRecord, raw)
            by_seq[record.seq] = record
        for (zkey, score), mine in self._scored.items():
            if zkey == key and isinstance(mine, MessageRecord) and int(score) > after:
                by_seq[int(score)] = mine
        return [by_seq[seq] for seq in sorted(by_seq)][:limit]

    # -- the end of a run ---------------------------------------------------------------------

    def _read_conditions(self) -> list[Condition]:
        versions = [
            Condition("v", self._k.version(sid), sid, version, f"session {sid!r}")
            for sid, version in self._used.items()
        ]
        # The session records read, by their own version too: every journal transition
        # writes its session record, so even a writer that does not bump the session's
        # version (an fxdurable from before it) fails this commit rather than be overwritten.
        records = []
        for sid in self._used:
            key = self._k.session(sid)
            if self._strings.get(key) is not None:
                session = self._stored(SessionRecord, key)
                assert session is not None
                records.append(Condition("s", key, "", session.version, f"session {sid!r}"))
        return versions + records + self._raw

    def _own_snapshot(self) -> bool:
        """Whether this run read one session only, all of it from what this store's own
        last commit to it left (nothing fetched), with the session's lease this store's:
        the lease holder's first read after its commit (a tool result's, before the next
        model request) is then that commit's state, and costs no round trip. Anything that
        commit did not see (a steer, an abort another process wrote since) moves the
        session's version, so the holder's next commit reruns on fresh reads, and its next
        read checks the version again."""
        if self._raw or self._confirmed or len(self._used) != 1:
            return False
        ((sid, version),) = self._used.items()
        with self._caches.lock:
            return self._caches.own_snapshot(sid, version, time.time())

    def still_current(self) -> bool:
        """Whether what this run read still holds: one round trip, or none when its last
        fetch already confirmed every session it used and everything else it read, or when
        it is the lease holder's first read after its own commit (:meth:`_own_snapshot`)."""
        if set(self._used) <= self._confirmed and not self._raw_stale:
            return True
        if self._own_snapshot():
            return True
        conditions = self._read_conditions()
        (reply,) = self._link.call([commit_command(self._k, conditions, [])])
        try:
            commit_outcome(reply, conditions, self._link.where)
        except Rerun:
            self._caches.drop(list(self._used))
            return False
        return True

    def finish(self) -> None:
        """Commit the writes with one script, or validate the reads of a body that wrote
        nothing."""
        if not self._ops:
            if not self.still_current():
                raise Rerun
            return
        link = self._link
        conditions = [*self._read_conditions(), *self._conditions]
        command = commit_command(self._k, conditions, self._ops, token=new_token())
        try:
            (reply,) = link.call([command], committing=True)
        except Unanswered as lost:
            # Unknown outcome: what the caches would be moved to is a guess, so they go; the
            # same commit (same token) is sent again and answers what it did, applied at most
            # once. A Rerun from it reads afresh.
            with self._caches.lock:
                touched = [sid for _, key, _ in self._ops if (sid := self._caches.session_of(key))]
            self._caches.drop([*self._used, *touched])
            commit_outcome(resend(link, command, lost), conditions, link.where)
            return
        try:
            bumped = commit_outcome(reply, conditions, link.where)
        except (Rerun, ConflictError):
            # Refused: what this run read may be what made it wrong; the next run (the
            # store's, or the wake's after a conflict) reads afresh rather than recompute it.
            self._caches.drop(list(self._used))
            raise
        if self.deleted:
            # An erase: the cache learns nothing from it (its sessions are read afresh).
            with self._caches.lock:
                touched = [sid for _, key, _ in self._ops if (sid := self._caches.session_of(key))]
            self._caches.drop([*self._used, *touched])
            return
        records = {k: v for k, v in self._new.items() if not isinstance(v, str)}
        for key, record in records.items():
            if isinstance(record, SessionRecord):
                before = self._stored(SessionRecord, key) if key in self._strings else None
                self._caches.hold(record, before)
        self._caches.advance_by(bumped, self._ops, records)


def _string_of(key: str) -> Callable[[SessionCache], tuple[bytes | None, object] | None]:
    def take(cache: SessionCache) -> tuple[bytes | None, object] | None:
        return (cache.strings[key], cache.decoded.get(key)) if key in cache.strings else None

    return take


def _set_string(key: str, raw: bytes | None) -> Callable[[SessionCache], None]:
    def store(cache: SessionCache) -> None:
        cache.strings[key] = raw

    return store


def _score(member: tuple[float, bytes]) -> float:
    return member[0]
