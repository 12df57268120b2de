"""The read half of a DynamoDB transaction: items by key and ranges, through the cache.

A :class:`Reads` serves one run of one body. Its first touch of a versioned partition either
takes the store's cache of it at the version the cache holds (a transaction: the commit's
condition ``sv = v`` proves it, costing no request now; or the lease holder's first read of
its session after its own commit, :meth:`Caches.own_snapshot`), or reads the partition's
head with a strongly consistent ``GetItem`` (any other read view, or nothing cached). Items
and ranges the cache misses are fetched after that (``GetItem``, ``Query``, ``BatchGetItem``,
all strongly consistent and paginated) and kept at that version. Reads see the body's own
writes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from fxdurable.core.optimistic import UNKNOWN, Unknown
from fxdurable.core.recordcodec import decode
from fxdurable.stores._ddb_api import Api
from fxdurable.stores._ddb_blobs import Blobs
from fxdurable.stores._ddb_cache import Caches, PartCache
from fxdurable.stores._ddb_items import HEAD, SESSION_PREFIX, Item, Key, versioned

__all__ = ["Reads"]

R = TypeVar("R")
T = TypeVar("T")

wall_clock = time.time  # what a lease's expiry and a commit's age are read against (tests)


class Reads:
    def __init__(
        self,
        api: Api,
        blobs: Blobs,
        caches: Caches,
        *,
        writable: bool,
        suspects: frozenset[Key] = frozenset(),
    ) -> None:
        self._api = api
        # Records a cancelled commit of this body wrote blind and whose condition failed: this
        # run reads them before it writes them (peek), so it decides on what is stored.
        self.suspects = suspects
        self._blobs = blobs
        self._caches = caches
        self._writable = writable
        self.used: dict[str, int] = {}  # versioned partition -> the version this run relies on
        # Partitions whose state this run took from something other than a head it read
        # last: a cache not confirmed, or items fetched after the head. A run that commits
        # nothing checks their heads again before its result stands.
        self.unverified: set[str] = set()
        self.absent_fixed: set[Key] = set()  # pointers and request ids read absent
        self._seen: dict[Key, Item | None] = {}
        self.writes: dict[Key, Item | None] = {}  # the body's own writes (None: deleted)

    # -- partitions and the cache -------------------------------------------------------------

    def _use(self, pk: str) -> None:
        """Rely on ``pk`` from now on: at the cached version (a transaction), or at the
        version its head holds now (one ``GetItem``)."""
        if pk in self.used:
            return
        with self._caches.lock:
            if self._writable:
                cache = self._caches.get(pk)
                if cache is not None:
                    self.used[pk] = cache.version
                    self.unverified.add(pk)
                    return
            elif pk.startswith(SESSION_PREFIX):
                # The lease holder's first read after its own commit: that commit's state.
                # Not unverified: a run that fetches nothing more stands without a request.
                own = self._caches.own_snapshot(pk, wall_clock())
                if own is not None:
                    self.used[pk] = own
                    return
        head = self._resolved(self._api.get((pk, HEAD)))
        version = _version(head)
        self.used[pk] = version
        self._seen[(pk, HEAD)] = head
        with self._caches.lock:
            cache = self._caches.at(pk, version)
            if cache is not None:  # else a newer one is held: this head is already old
                cache.items[HEAD] = head

    def _cache(self, pk: str, take: Callable[[PartCache], T | None]) -> T | None:
        """What the cache of ``pk`` holds, at the version this run uses (else None)."""
        with self._caches.lock:
            cache = self._caches.get(pk)
            if cache is None or cache.version != self.used.get(pk):
                return None
            return take(cache)

    def _keep(self, pk: str, store: Callable[[PartCache], None]) -> None:
        """Keep what was fetched of ``pk`` in its cache, if that is still at this run's
        version (newer data under an older version is caught by the next version check)."""
        self.unverified.add(pk)
        with self._caches.lock:
            cache = self._caches.get(pk)
            if cache is not None and cache.version == self.used.get(pk):
                store(cache)

    def _resolved(self, item: Item | None) -> Item | None:
        if item is not None and item.ref is not None and item.body is None:
            item.body = self._blobs.resolve(item.ref)
        return item

    # -- items --------------------------------------------------------------------------------

    def _here(self, key: Key) -> Item | Unknown | None:
        """``key`` as this run wrote or read it."""
        if key in self.writes:
            return self.writes[key]
        return self._seen.get(key, UNKNOWN)

    def peek(self, key: Key) -> Item | Unknown | None:
        """The state of ``key`` as this run knows it without a request (for a write's check)."""
        here = self._here(key)
        if here is not UNKNOWN:
            return here
        if key in self.suspects:
            return self.item(key)
        pk, sk = key
        if not versioned(pk):
            fixed = self._caches.fixed.get(key)
            return UNKNOWN if fixed is None else fixed
        if self._writable and pk not in self.used:
            with self._caches.lock:
                held = self._caches.get(pk) is not None
            if held:
                self._use(pk)

        def take(cache: PartCache) -> tuple[Item | None] | None:
            if sk in cache.items:
                return (cache.items[sk],)
            return (None,) if cache.covers(sk) else None

        found = self._cache(pk, take) if pk in self.used else None
        return UNKNOWN if found is None else found[0]

    def item(self, key: Key) -> Item | None:
        here = self._here(key)
        if not isinstance(here, Unknown):
            return here
        pk, sk = key
        if not versioned(pk):
            found: Item | None = self._caches.fixed.get(key)
            if found is None:
                found = self._api.get(key)
                if found is None:
                    self.absent_fixed.add(key)
                else:
                    self._caches.learn(found)
            self._seen[key] = found
            return found
        self._use(pk)
        hit = self._cache(pk, lambda c: (c.items[sk],) if sk in c.items else None)
        if hit is not None:
            found = hit[0]
        else:
            found = self._resolved(self._api.get(key))

            def store(cache: PartCache, item: Item | None = found) -> None:
                cache.items[sk] = item

            self._keep(pk, store)
        self._seen[key] = found
        return found

    def heads(self, pks: Sequence[str]) -> dict[str, Item]:
        """Heads of many partitions in one go (``BatchGetItem``), for the session indexes:
        read as they are now, not kept, not relied on by the commit."""
        found = self._api.batch_get([(pk, HEAD) for pk in pks])
        out: dict[str, Item] = {}
        for pk in pks:
            key = (pk, HEAD)
            item = self.writes.get(key) if key in self.writes else found.get(key)
            if item is not None:
                self._resolved(item)
                out[pk] = item
        return out

    def range(self, pk: str, prefix: str, start: str = "", limit: int | None = None) -> list[Item]:
        """Items under ``prefix`` from ``start`` on, in sort-key order, own writes included."""
        if versioned(pk):
            self._use(pk)
            held = self._cache(pk, lambda c: c.range(prefix, start))
            if held is None:
                fetched = self._api.query(pk, prefix, start or None, limit)
                for item in fetched:
                    self._resolved(item)
                if limit is None:

                    def store(cache: PartCache) -> None:
                        cache.hold_range(prefix, start, fetched)

                    self._keep(pk, store)
                else:
                    self.unverified.add(pk)
                held = fetched
        else:
            held = self._api.query(pk, prefix, start or None, limit)
        by_sk: dict[str, Item | None] = {i.sk: i for i in held}
        for (wpk, sk), mine in self.writes.items():
            if wpk == pk and sk.startswith(prefix) and sk >= start:
                by_sk[sk] = mine
        items = [i for _, i in sorted(by_sk.items()) if i is not None]
        return items[:limit] if limit is not None else items

    @staticmethod
    def record(cls: type[R], item: Item | None) -> R | None:
        if item is None or item.body is None:
            return None
        if not isinstance(item.record, cls):
            item.record = decode(cls, item.body)
        return item.record

    # -- the end of a run ---------------------------------------------------------------------

    def still_current(self) -> bool:
        """Whether every partition this run relied on is still at the version it used: one
        ``BatchGetItem`` of their heads, or none when each was confirmed by a head read with
        nothing fetched after it (and the run used one partition)."""
        check = set(self.unverified)
        if len(self.used) > 1:
            check = set(self.used)
        if not check:
            return True
        heads = self._api.batch_get([(pk, HEAD) for pk in check])
        moved = [pk for pk in check if _version(heads.get((pk, HEAD))) != self.used[pk]]
        if moved:
            self._caches.drop(moved)
            return False
        return True


def _version(head: Item | None) -> int:
    return (head.sv or 0) if head is not None else 0
