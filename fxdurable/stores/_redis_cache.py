"""The Redis store's read cache: what a session's keys held at one version of the session.

Every key of a session (see :meth:`Keys.owner`) belongs to it, and every commit that writes
one of them bumps the session's version (``p:sv:<sid>``, in ``lua/commit.lua``). So what a
store read of a session's keys at version *v* is still what they hold while the version is
*v*: a :class:`SessionCache` keeps it (raw values, hashes and index sets held whole, and the
decoded records), and a reader needs only the version to use it. ``lua/read.lua`` returns a
command's reply together with the version of the session its key belongs to, taken in one
atomic step, so a miss costs one round trip and tells the reader the version too.

A commit of this store applies its own writes to the caches of the sessions it checked
(:meth:`Caches.advance`): the script proved their version was the one the body read, so the
cache plus the writes is the state at the version the script returns. Another store's commit
moves the version on and the next reader finds out (one round trip) and reads afresh.

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

    __slots__ = ("decoded", "fields", "full", "members", "memo", "since", "strings", "version")

    def __init__(self, version: int) -> None:
        self.version = version
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
        read: dict[str, int],
        bumped: dict[str, int],
        ops: Sequence[Op],
        records: dict[str, object],
    ) -> None:
        """After a commit: each session the body read at ``read[sid]`` and the script moved
        to ``read[sid] + 1`` gets the commit's writes; any other session it moved is
        dropped. ``records`` are the records the commit wrote, by key."""
        with self.lock:
            for key, record in records.items():
                sid = getattr(record, "session_id", None)
                if isinstance(sid, str) and self._keys.owner(key) == ("o", key):
                    self.learn(key, sid)

        def apply(sid: str, cache: SessionCache) -> None:
            for command, key, args in ops:
                if self.session_of(key) == sid:
                    _apply(cache, command, key, args, records)

        self.advance(read, bumped, apply)


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
