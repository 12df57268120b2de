"""A lease holder's renewals wait for its own transitions in flight.

A renewal rewrites the session row (the lease is in it), and so moves the session's version,
which every transition of the holder relies on. On a store that commits optimistically
(Redis, DynamoDB) a transition whose reads take longer than the heartbeat period would meet
its own process's renewal at every commit, run again on fresh reads, meet the next renewal,
and give up after its runs (seen in CI: DynamoDB on a loaded moto, a 50 ms heartbeat). These
writers are in one process; they need not find each other out at the store.

:class:`HolderGate` orders them in memory, per session: a renewal waits until the holder's
transitions that were in flight when it arrived have ended (later ones do not hold it up, so
a stream of them cannot starve it). Transitions never wait for a renewal: one that starts
while a renewal commits may meet it once and run again, and the next renewal then waits for
that run. (A first version also held new transitions back while a renewal committed: with
the store paused, every transition then queued behind a renewal hanging in it, and the fault
tests' recovery took a second lease, tests/runtime/test_lease_faults.py.) A renewal waits a
bounded time: a transition stuck in a store that does not answer must not also stop the
renewal the lease depends on, so after ``wait_s`` it goes through beside it, and the store's
version check decides. The gate is only about wasted runs; correctness never rests on it
(another process's writers are not gated).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HolderGate"]


class HolderGate:
    """Per session, the fenced transitions in flight in this process, for renewals to wait on."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight: dict[str, set[int]] = {}  # session -> tickets of its transitions
        self._tickets = itertools.count()

    @contextmanager
    def transition(self, session_id: str) -> Iterator[None]:
        """Around a fenced transition: counted in flight while it runs; never waits."""
        with self._cond:
            ticket = next(self._tickets)
            self._in_flight.setdefault(session_id, set()).add(ticket)
        try:
            yield
        finally:
            with self._cond:
                tickets = self._in_flight[session_id]
                tickets.discard(ticket)
                if not tickets:
                    del self._in_flight[session_id]  # the map holds sessions in flight only
                self._cond.notify_all()

    def renewal(self, session_id: str, *, wait_s: float) -> bool:
        """Before a renewal: wait until the session's transitions that were in flight now
        have ended. True when they did, False when ``wait_s`` ran out first."""
        with self._cond:
            ticket = next(self._tickets)
            return self._cond.wait_for(
                lambda: not any(t < ticket for t in self._in_flight.get(session_id, ())),
                timeout=wait_s,
            )
