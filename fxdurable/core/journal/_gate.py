"""A lease holder's renewals never race its own transitions.

A renewal rewrites the session row (the lease is in it), and so moves the session's version,
which every transition of the holder relies on. On a store that commits optimistically
(Redis, DynamoDB) a transition whose reads take longer than the heartbeat period would meet
its own process's renewal at every commit, run again on fresh reads, meet the next renewal,
and give up after its runs (seen in CI: DynamoDB on a loaded moto, a 50 ms heartbeat). These
writers are in one process; they need not find each other out at the store.

:class:`HolderGate` orders them in memory, per session: the holder's transitions pass
together (parallel tool calls of one session still share a group commit, and still meet
each other at the store as before), a renewal waits until none is in flight and holds new
ones back while it commits; each waits only for the arrivals before it, so neither side
starves the other. A renewal waits a bounded time: a
transition stuck in a store that does not answer must not also stop the renewal that the
lease depends on, so after ``wait_s`` it goes through as it did before the gate, and the
store's version check still decides. The gate is only about wasted runs; correctness never
rests on it (another process's writers are not gated).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["HolderGate"]


@dataclass(slots=True)
class _Session:
    passing: int = 0  # transitions in flight
    renewer: int | None = None  # the thread whose renewal holds the gate
    # Arrivals waiting, by ticket: each waits only for those that came before it (so a
    # renewal loop cannot starve a transition, nor a stream of transitions a renewal).
    transitions: set[int] = field(default_factory=set)
    renewals: set[int] = field(default_factory=set)

    def idle(self) -> bool:
        return not (self.passing or self.renewer or self.transitions or self.renewals)


class HolderGate:
    """Per-session order between one process's fenced transitions and its renewals."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sessions: dict[str, _Session] = {}
        self._tickets = itertools.count()

    @contextmanager
    def transition(self, session_id: str) -> Iterator[None]:
        """Around a fenced transition: waits while a renewal of the session that came
        before it commits or waits."""
        me = threading.get_ident()
        with self._cond:
            state = self._sessions.setdefault(session_id, _Session())
            if state.renewer != me:  # not the renewal's own transaction, already inside
                ticket = next(self._tickets)
                state.transitions.add(ticket)
                while state.renewer is not None or _any_before(state.renewals, ticket):
                    self._cond.wait()
                state.transitions.discard(ticket)
            state.passing += 1
        try:
            yield
        finally:
            with self._cond:
                state.passing -= 1
                self._settle(session_id, state)

    @contextmanager
    def renewal(self, session_id: str, *, wait_s: float) -> Iterator[bool]:
        """Around a renewal: yields True once no transition of the session is in flight or
        came before it, or False when ``wait_s`` ran out first (the renewal then goes
        through ungated)."""
        with self._cond:
            state = self._sessions.setdefault(session_id, _Session())
            ticket = next(self._tickets)
            state.renewals.add(ticket)
            deadline = time.monotonic() + wait_s
            while not (gated := _clear(state, ticket)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            state.renewals.discard(ticket)
            if gated:
                state.renewer = threading.get_ident()
            else:
                self._settle(session_id, state)  # ungated: hold no transition back
        try:
            yield gated
        finally:
            if gated:
                with self._cond:
                    state.renewer = None
                    self._settle(session_id, state)

    def _settle(self, session_id: str, state: _Session) -> None:
        """Wake the waiters; forget a session nobody is in (the map stays the size of the
        sessions in flight). Called with the condition held."""
        self._cond.notify_all()
        if state.idle() and self._sessions.get(session_id) is state:
            del self._sessions[session_id]


def _clear(state: _Session, ticket: int) -> bool:
    """Whether renewal ``ticket`` may hold the gate: nothing in flight, nobody before it."""
    before = _any_before(state.transitions, ticket)
    return not state.passing and state.renewer is None and not before


def _any_before(tickets: set[int], ticket: int) -> bool:
    return any(t < ticket for t in tickets)
