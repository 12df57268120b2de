"""The Redis store's read cache: what a session's keys held at one version of the session.

Every key of a session (see :meth:`Keys.owner`) belongs to it, and every commit that writes
one of them bumps the session's version (``p:sv:<sid>``, in ``lua/commit.lua``). So what a
store read of a session's keys at version *v* is still what they hold while the version is
*v*: a :class:`SessionCache` keeps it (raw values, hashes and index sets held whole, and the
decoded records), and a reader needs only the version to use it. ``lua/read.lua`` returns a
command's reply together with the version of the session its key belongs to, taken in one
atomic step, so a miss costs one round trip and tells the reader the version too.

A commit of this store applies its own writes to the caches of the sessions it wrote
(:meth:`Caches.advance_by`): the script bumps each once, atomically with the writes, so a
new version *v* in its reply proves the session stood at *v - 1* before them (the version
the body read, or the one before a blind write from held records), and a cache at *v - 1*
plus the writes is the state at *v*. Another store's commit
moves the version on and the next reader finds out (one round trip) and reads afresh. The
lease holder's first read after its own commit is served from that commit's state without
the round trip (:meth:`Caches.own_snapshot`; its rules: :mod:`fxdurable.stores.redis`).

At most :data:`MAX_SESSIONS` sessions are held (least recently used goes first).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis

from fxdurable.core.records import SessionRecord
from fxdurable.stores._cache import VersionedCache
from fxdurable.stores._redis_wire import (
    Command,
    Keys,
    Link,
    NoScript,
    Op,
    raise_errors,
    text,
)

__all__ = [
    "MAX_SESSIONS",
    "READ_SCRIPT",
    "READ_SHA",
    "Caches",
    "Fetched",
    "SessionCache",
    "Unsupported",
    "fetch",
]

MAX_SESSIONS = 64
_APPEND_ONLY = frozenset({"msgs", "events"})  # zsets whose members (records) are never re-added
_MAX_RECORD_KEYS = 100_000
READ_SCRIPT = resources.files("fxdurable.stores").joinpath("lua/read.lua").read_bytes()
READ_SHA = hashlib.sha1(READ_SCRIPT).hexdigest()

Owner = tuple[str, str] | None
Fetched = tuple[str | None, int | None, Any]  # (session id, its version, the reply)


class Unsupported(BaseException):
    """The body read something no session owns in a way the script cannot re-check (every
    session, or an index of a record that does not exist): run it on the WATCH path."""


class SessionCache:
    """What one session's keys held at ``version`` (only what some reader fetched)."""

    __slots__ = (
        "decoded",
        "fields",
        "full",
        "members",
        "memo",
        "own",
        "since",
        "strings",
        "version",
    )

    def __init__(self, version: int) -> None:
        self.version = version
        # The epoch (Caches.epoch) in which this store's own commit moved the cache to
        # ``version``, until a read is served from it unchecked (None: no such commit).
        self.own: int | None = None
        self.strings: dict[str, bytes | None] = {}  # None: absent
        self.decoded: dict[str, object] = {}  # string key -> its record
        self.fields: dict[str, dict[str, bytes | None]] = {}  # hash key -> fields read
        # zset member -> its record: the member is the record's JSON, so this holds at any
        # version and is carried over to the next cache of the session
        self.memo: dict[bytes, object] = {}
        self.full: set[str] = set()  # hashes held whole
        # zsets and lists held whole: (score, member) by score; a list's score is its position
        self.members: dict[str, list[tuple[float, bytes]]] = {}
        self.since: dict[str, float] = {}  # a zset held from past this score on (a tail)


def _fresh(version: int, previous: SessionCache | None) -> SessionCache:
    cache = SessionCache(version)
    if previous is not None:
        cache.memo = previous.memo  # zset members are their records' JSON: true at any version
    return cache


class Caches(VersionedCache[SessionCache]):
    """Every session's cache (the shape and its rules: :mod:`._cache`), and which session a
    record key belongs to (that never changes)."""

    def __init__(self, keys: Keys) -> None:
        super().__init__(_fresh, limit=MAX_SESSIONS)
        self._keys = keys
        self._record_sid: dict[str, str] = {}  # record key -> its session (never changes)
        # Moved on by every commit of the WATCH path, which writes without moving the caches:
        # no cache moved by an own commit before it may be served unchecked (see Caches.own).
        self.epoch = 0

    def session_of(self, key: str) -> str | None:
        """The session a key belongs to, when known without asking the server."""
        owner = self._keys.owner(key)
        if owner is None:
            return None
        kind, arg = owner
        return arg if kind == "s" else self._record_sid.get(arg)

    def learn(self, record_key: str, sid: str) -> None:
        if len(self._record_sid) >= _MAX_RECORD_KEYS:
            self._record_sid.clear()
        self._record_sid[record_key] = sid

    def advance_by(
        self,
        bumped: dict[str, int],
        ops: Sequence[Op],
        records: dict[str, object],
    ) -> None:
        """After a commit: each session the script moved to version *v* gets the commit's
        writes if what this store holds of it is at *v - 1*; any other session it moved is
        dropped. ``records`` are the records the commit wrote, by key.

        No guess: the script bumps each session it wrote once (``INCR``, in the same atomic
        step as the writes), so *v* in its reply proves the session stood at *v - 1* just
        before them, whether the body read it (its ``read`` version, checked by the script)
        or wrote it blind from records the journal held."""
        with self.lock:
            for key, record in records.items():
                sid = getattr(record, "session_id", None)
                if isinstance(sid, str) and self._keys.owner(key) == ("o", key):
                    self.learn(key, sid)

        def apply(sid: str, cache: SessionCache) -> None:
            for command, key, args in ops:
                if self.session_of(key) == sid:
                    _apply(cache, command, key, args, records)
            cache.own = self.epoch

        self.advance({sid: v - 1 for sid, v in bumped.items()}, bumped, apply)

    def written_elsewhere(self, sid: str | None) -> None:
        """Another process says it wrote ``sid`` (an abort or a steer, by pub/sub): what this
        store holds may be behind, so no read of it stands unchecked any more. ``None``: any
        session may have been (pushes were missed while unsubscribed): none stands."""
        with self.lock:
            if sid is None:
                self.epoch += 1  # no cache moved by an own commit before now is served
                return
            cache = self.get(sid)
            if cache is not None:
                cache.own = None

    def own_snapshot(self, sid: str, version: int, now: float) -> bool:
        """Whether a read of ``sid`` at ``version`` may stand without checking the version
        (:meth:`CachedTx.still_current`): what this store holds came from its own commit, no
        read has been served from it unchecked yet, and the session's lease is this
        store's and live. Marks it served. Callers hold :attr:`lock`."""
        cache = self.get(sid)
        if cache is None or cache.version != version or cache.own != self.epoch:
            return False
        session = cache.decoded.get(self._keys.session(sid))
        if not isinstance(session, SessionRecord):
            return False
        if not self.holds(session, now):
            return False
        cache.own = None
        return True


def _apply(
    cache: SessionCache, command: str, key: str, args: tuple[Any, ...], records: dict[str, object]
) -> None:
    if command == "SET":
        cache.strings[key] = str(args[0]).encode()
        if key in records:
            cache.decoded[key] = records[key]
    elif command == "HSET":
        cache.fields.setdefault(key, {})[str(args[0])] = str(args[1]).encode()
    elif key in cache.members:
        members = cache.members[key]
        if command == "RPUSH":
            members.append((float(len(members)), str(args[0]).encode()))
            return
        member = str(args[-1]).encode()
        if command == "ZREM" or key.split(":", 2)[1] not in _APPEND_ONLY:
            members[:] = [m for m in members if m[1] != member]
        if command == "ZADD" and float(args[0]) > cache.since.get(key, -math.inf):
            bisect.insort(members, (float(args[0]), member))


def fetch(link: Link, keys: Keys, reads: Sequence[tuple[Owner, Command | None]]) -> list[Fetched]:
    """One ``EVALSHA`` of ``lua/read.lua``: per read, its session, that session's version
    and the command's reply (a ``None`` command asks for the version alone)."""
    index: dict[str, int] = {}

    def ix(key: str) -> int:
        return index.setdefault(key, len(index) + 1)

    argv: list[str | bytes | int | float] = [keys.p]
    for owner, command in reads:
        kind, arg = owner or ("-", "")
        argv += [kind, ix(arg) if kind == "o" else arg]
        if command is None:
            argv += [0, ""]
        else:
            name, key, *args = command
            argv += [len(args), name, ix(str(key)), *args]
    (reply,) = link.call([("EVALSHA", READ_SHA, len(index), *index, *argv)])
    if isinstance(reply, redis.exceptions.NoScriptError):
        raise NoScript
    raise_errors([reply], link.where)
    return [
        (None if sid is None else text(sid), version, value)
        for sid, version, value in zip(reply[::3], reply[1::3], reply[2::3], strict=True)
    ]
