"""The DynamoDB store's read cache: what a partition held at one version of its head.

Every commit that writes an item of a versioned partition (a session's, a turn's model calls,
a submission's attempts) moves the partition's head version ``sv`` in the same transaction.
So what was read of a partition at version *v* is what it holds while its head says *v*: a
:class:`PartCache` keeps it. A reader learns the version with one strongly consistent
``GetItem`` of the head, read *before* anything else of the partition (so what follows is
at least that new: anything newer moved the head, which the next check sees). A commit
conditioned on ``sv = v`` proves the cache was current; this store then applies its own
writes to it and moves it to *v + 1* (:meth:`Caches.advance`).

The lease holder's first read of its session after its own commit is that commit's state,
without the ``GetItem`` of the head (:meth:`Caches.own_snapshot`; its rules:
:mod:`fxdurable.stores.dynamodb`). A commit whose outcome was unknown or that was refused
drops the caches it touched, so no read is ever served from a guess.

Pointers and request ids never change once written: :attr:`Caches.fixed` keeps them for
good. At most :data:`MAX_PARTITIONS` partitions are held (least recently used goes first).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from fxdurable.core.notify import Notifier
from fxdurable.core.recordcodec import decode
from fxdurable.core.records import SessionRecord
from fxdurable.stores._cache import VersionedCache
from fxdurable.stores._ddb_items import HEAD, Item, Key

__all__ = ["MAX_PARTITIONS", "OWN_SNAPSHOT_S", "Caches", "PartCache"]

MAX_PARTITIONS = 256
# How long after its own commit the holder's first read may be that commit's state: less than
# the interrupt watcher's poll period, so a poll (made a period into a call, which starts after
# the commit) always checks the head and sees another process's abort or steer at once, while
# the runtime's read right after a commit (the model request's, a few ms later) is free.
OWN_SNAPSHOT_S = Notifier.poll_s
# Sort-key prefixes of append-only records (messages, events): kept only inside a range a
# reader holds, never one by one, so a session's history is not held just for being written.
_APPEND_ONLY = ("MSG#", "EV#")
_MAX_FIXED = 100_000


class PartCache:
    """What one partition held at ``version`` (only what some reader fetched)."""

    __slots__ = ("items", "own_at", "ranges", "version")

    def __init__(self, version: int) -> None:
        self.version = version
        # When this store's own commit moved it to ``version`` (wall clock), while no read
        # has been served from it unchecked since (Caches.own_snapshot); else None.
        self.own_at: float | None = None
        self.items: dict[str, Item | None] = {}  # sort key -> item (None: absent)
        # prefix -> the first sort key from which every item under the prefix is in items
        # ("" : all of them)
        self.ranges: dict[str, str] = {}

    def covers(self, sk: str) -> bool:
        """Whether a held range includes ``sk`` (so its absence from items means absent)."""
        return any(sk.startswith(p) and sk >= since for p, since in self.ranges.items())

    def range(self, prefix: str, start: str) -> list[Item] | None:
        """The items under ``prefix`` from ``start`` on, if held whole (else None)."""
        since = self.ranges.get(prefix)
        if since is None or since > start:
            return None
        if prefix in _APPEND_ONLY and start > since:
            # A reader past a cursor holds what came before it: let that go, so what the
            # store holds of a long session does not grow with it.
            for sk in [sk for sk in self.items if sk.startswith(prefix) and sk < start]:
                del self.items[sk]
            self.ranges[prefix] = start
        found = [
            item
            for sk, item in self.items.items()
            if item is not None and sk.startswith(prefix) and sk >= start
        ]
        return sorted(found, key=lambda i: i.sk)

    def hold_range(self, prefix: str, start: str, items: Iterable[Item]) -> None:
        for item in items:
            self.items[item.sk] = item
        since = self.ranges.get(prefix)
        if since is None or start < since:
            self.ranges[prefix] = start


class Caches(VersionedCache[PartCache]):
    """Every partition's cache (the shape and its rules: :mod:`._cache`), and the pointers and
    request ids as written (they never change)."""

    def __init__(self) -> None:
        super().__init__(lambda version, _previous: PartCache(version), limit=MAX_PARTITIONS)
        self.fixed: dict[Key, Item] = {}  # pointers and request ids as written (never change)

    def forget(self, keys: Iterable[Key]) -> None:
        """Let go of these pointers and request ids (a commit found them not as held)."""
        with self.lock:
            for key in keys:
                self.fixed.pop(key, None)

    def learn(self, item: Item) -> None:
        with self.lock:
            if len(self.fixed) >= _MAX_FIXED:
                self.fixed.clear()
            self.fixed[item.key] = item

    def own_snapshot(self, pk: str, now: float) -> int | None:
        """The version at which a read view may take the session partition ``pk`` without
        reading its head: what this store holds of it came from its own last commit, less
        than :data:`OWN_SNAPSHOT_S` before ``now``, no read has been served from that
        unchecked yet, and the session's lease is this store's (it took it) and live by
        ``now``. Marks it served. None: read the head. Callers hold :attr:`lock`."""
        cache = self.get(pk)
        if cache is None or cache.own_at is None or now - cache.own_at >= OWN_SNAPSHOT_S:
            return None
        head = cache.items.get(HEAD)
        if head is None or head.body is None:
            return None
        session = head.record
        if not isinstance(session, SessionRecord):
            session = head.record = decode(SessionRecord, head.body)
        if not self.holds(session, now):
            return None
        cache.own_at = None
        return cache.version

    def advance_by(self, read: dict[str, int], writes: dict[Key, Item | None]) -> None:
        """After a commit conditioned on ``sv = read[pk]`` for each partition it wrote and
        read: apply its writes to those partitions' caches (now at ``read[pk] + 1``) and drop
        the caches of partitions it wrote without that condition."""
        committed = time.time()
        written: dict[str, list[tuple[str, Item | None]]] = {}
        for (pk, sk), item in writes.items():
            written.setdefault(pk, []).append((sk, item))

        def apply(pk: str, cache: PartCache) -> None:
            for sk, item in written[pk]:
                if sk.startswith(_APPEND_ONLY) and not cache.covers(sk):
                    # Not held, and not held absent either: a get of it (a primitive no
                    # journal read makes) may have left None there before this write.
                    cache.items.pop(sk, None)
                    continue
                cache.items[sk] = item
            version = cache.version + 1
            head = cache.items.get(HEAD)
            if head is None or head.sv != version:
                # The commit moved the head (ADD sv 1) without rewriting its record.
                base = head or Item(pk=pk, sk=HEAD)
                cache.items[HEAD] = dataclasses.replace(base, sv=version)
            cache.own_at = committed

        # A partition written without having been read has no version here: -1 moves to 0,
        # which no held entry of it matches, so it is dropped.
        self.advance(read, {pk: read.get(pk, -1) + 1 for pk in written}, apply)
