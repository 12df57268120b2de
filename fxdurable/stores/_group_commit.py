"""Group commit for a store with one writer at a time: transactions that arrive while another
commits share the next commit, so several sessions' commits pay one fsync.

Each caller's thread queues its transaction. When no commit is in progress it leads: it takes
every queued transaction, runs them one after another in one store transaction (the store
isolates each, e.g. by a savepoint, so a failing one is undone alone) and commits once; then
it hands the lead to the first transaction that queued meanwhile, and every transaction of the
group returns (or raises) only after that commit. A transaction arriving alone runs alone, as
it would without this: no extra thread, no extra handoff, no extra statement.

Why not a long-lived writer thread fed by a queue (issue 23): every transaction would cross
twice, into that thread and back, where today's caller (already in a worker thread, see
:mod:`fxdurable.runtime.crossing`) can run its own; the leader gives the same grouping without
the hop. A group's outcome is shared: if its commit fails, every transaction that was in it
gets that failure, as each would have got it from a commit of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from fxdurable.core.store import Tx

__all__ = ["GroupCommit", "Queued"]

T = TypeVar("T")


@dataclass(eq=False)
class Queued(Generic[T]):
    """One caller's transaction body, and once its group has committed, its outcome."""

    body: Callable[[Tx], T]
    result: T | None = None
    error: BaseException | None = None
    settled: bool = False
    _woken: threading.Event = field(default_factory=threading.Event)

    def succeed(self, result: T) -> None:
        self.result, self.settled = result, True

    def fail(self, error: BaseException) -> None:
        self.error, self.settled = error, True

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class GroupCommit:
    """``run(body)`` runs ``body`` through ``commit_group``, alone or in a group.

    ``commit_group(group)`` runs each queued body in one store transaction, commits, and
    settles each (``succeed`` or ``fail``); what it leaves unsettled (it raised) fails with
    what it raised.
    """

    def __init__(self, commit_group: Callable[[Sequence[Queued[Any]]], None]) -> None:
        self._commit_group = commit_group
        self._mutex = threading.Lock()
        self._queued = threading.Condition(self._mutex)
        self._queue: list[Queued[Any]] = []
        self._leading = False
        self._in_group = threading.local()

    def run(self, body: Callable[[Tx], T]) -> T:
        if getattr(self._in_group, "on", False):
            # It would queue behind the group this thread is running, and wait for ever.
            raise RuntimeError("a transaction body cannot start a transaction of its own")
        job: Queued[T] = Queued(body)
        with self._mutex:
            self._queue.append(job)
            self._queued.notify_all()
            follow = self._leading
            self._leading = True
        if follow:
            # Woken settled (a leader ran it) or unsettled (this thread leads next).
            job._woken.wait()
        if not job.settled:
            self._lead()
        return job.outcome()

    def wait_queued(self, count: int, timeout: float) -> bool:
        """Until ``count`` transactions wait for the commit in progress (for tests and the
        bench, to know a group has formed without sleeping)."""
        with self._mutex:
            return self._queued.wait_for(lambda: len(self._queue) >= count, timeout)

    def _lead(self) -> None:
        with self._mutex:
            group, self._queue = self._queue, []
        self._in_group.on = True
        try:
            self._commit_group(group)
        except BaseException as exc:
            for job in group:
                if not job.settled:
                    job.fail(exc)
            raise
        finally:
            self._in_group.on = False
            with self._mutex:
                successor = self._queue[0] if self._queue else None
                self._leading = successor is not None
            for job in group:
                job._woken.set()
            if successor is not None:
                successor._woken.set()
