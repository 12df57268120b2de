"""The one read-cache shape of the optimistic stores (Redis, DynamoDB).

Both stores version a *partition* of their data (a Redis session's keys, a DynamoDB
partition) so that every commit writing into it moves its version on. What a reader fetched of
a partition at version *v* is then still what it holds while the version is *v*: a
:class:`VersionedCache` keeps one entry per partition, at one version, and a reader uses it
only at the version its transaction relies on (the commit's condition proves it).

What an entry holds is the store's own (raw values and decoded records for Redis, items and
held ranges for DynamoDB); the shape is common: one lock, at most ``limit`` partitions (least
recently used goes first), an entry replaced when a newer version is seen and never by an
older one, and a commit of this store moving the entries it proved current to the next
version with its own writes (:meth:`VersionedCache.advance`).

The lesson both stores learnt (issue 22): **a cache is never kept past a write whose outcome is
unknown or refused.** A lost answer, a ConflictError or a rerun drops the entries of every
partition the run read or wrote (:meth:`VersionedCache.drop`), and the next run reads afresh,
so a decision is never taken twice from what may no longer be stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

from fxdurable.core.records import SessionRecord

__all__ = ["Entry", "VersionedCache"]


class Entry(Protocol):
    """What a partition held at ``version`` (the store's own fields beside it)."""

    version: int


E = TypeVar("E", bound=Entry)


class VersionedCache(Generic[E]):
    """Every partition's entry, shared by the threads of one store.

    ``make(version, previous)`` builds a fresh entry; ``previous`` is the one it replaces
    (older), so a store may carry over what holds at any version. Callers take :attr:`lock`
    around :meth:`get` and :meth:`at` and what they do with the entry; :meth:`drop` and
    :meth:`advance` take it themselves.
    """

    def __init__(self, make: Callable[[int, E | None], E], *, limit: int) -> None:
        self.lock = threading.Lock()
        self._make = make
        self._limit = limit
        self._entries: OrderedDict[str, E] = OrderedDict()
        # Sessions whose lease a commit of this store took, by the lease's owner id: the
        # holder's first read after its own commit may stand unchecked (the stores'
        # ``own_snapshot``) only while this store holds the session's lease.
        self.holding: dict[str, str] = {}

    def get(self, key: str) -> E | None:
        """The entry of ``key`` at whatever version it holds (marked recently used)."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def at(self, key: str, version: int) -> E | None:
        """The entry of ``key`` at ``version``, made afresh if it held an older one; None if
        it holds a newer one (what the caller fetched is already out of date: not kept)."""
        entry = self.get(key)
        if entry is not None and entry.version == version:
            return entry
        if entry is not None and entry.version > version:
            return None
        entry = self._entries[key] = self._make(version, entry)
        while len(self._entries) > self._limit:
            self._entries.popitem(last=False)
        return entry

    def drop(self, keys: Iterable[str]) -> None:
        """Let go of these partitions' entries: the next reader fetches afresh."""
        with self.lock:
            for key in keys:
                self._entries.pop(key, None)

    def advance(
        self,
        read: Mapping[str, int],
        moved: Mapping[str, int],
        apply: Callable[[str, E], None],
    ) -> None:
        """After a commit that moved each partition of ``moved`` to its version there: an
        entry the commit proved current (the run read it at ``read[key]``, the entry's
        version, and the commit moved it exactly one on) gets the commit's writes
        (``apply(key, entry)``) and the new version; any other entry it moved is dropped."""
        with self.lock:
            for key, version in moved.items():
                entry = self._entries.get(key)
                if entry is None:
                    continue
                if read.get(key) != entry.version or version != entry.version + 1:
                    del self._entries[key]
                    continue
                apply(key, entry)
                entry.version = version

    def hold(self, session: SessionRecord, before: SessionRecord | None) -> None:
        """A commit of this store wrote ``session`` over ``before`` (None: written blind, or
        new): note whether this store now holds its lease (it took it: a new owner)."""
        owner = session.lease.owner
        with self.lock:
            if owner is not None and before is not None and before.lease.owner != owner:
                self.holding[session.id] = owner
            elif self.holding.get(session.id) != owner or owner is None:
                self.holding.pop(session.id, None)

    def holds(self, session: SessionRecord, now: float) -> bool:
        """Whether ``session``'s lease is one this store took and, by ``now``, live. Callers
        hold :attr:`lock`."""
        lease = session.lease
        owner = lease.owner
        return (
            owner is not None and self.holding.get(session.id) == owner and lease.expires_at > now
        )
