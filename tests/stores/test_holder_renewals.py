"""A lease holder's renewals do not make its own transitions run again, on every store.

A renewal rewrites the session row every transition of the holder relies on. On Redis and
DynamoDB (optimistic commits), a transition whose reads outlast the heartbeat period used to
meet its own process's renewal at every commit and give up after its runs ("kept meeting
concurrent writes", CI: DynamoDB on a loaded moto with a 50 ms heartbeat). Here a transition
is held open between its reads and its commit while another thread renews as fast as it can:
no renewal lands while it is held, it runs at most twice (a renewal already committing as it
began), and the renewals land before and after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.core.store import Store, Tx

T = TypeVar("T")
TTL = 30.0


class HeldOpen:
    """A store whose transactions, while ``hold`` is set, wait between the body and the
    commit until ``release`` is set, and count the body's runs."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.hold = False
        self.held = threading.Event()  # a held transaction has read and waits
        self.release = threading.Event()
        self.runs = 0

    def transact(self, body: Callable[[Tx], T]) -> T:
        if not self.hold or threading.current_thread() is not threading.main_thread():
            return self._store.transact(body)

        def held_open(tx: Tx) -> T:
            self.runs += 1
            result = body(tx)
            self.held.set()
            assert self.release.wait(30)
            return result

        return self._store.transact(held_open)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_transition_held_open_while_its_holder_renews_is_not_run_over(store: Store) -> None:
    held = HeldOpen(store)
    journal = Journal(cast(Store, held), SystemClock(), RandomIds())
    sub = journal.admit("s", agent="a", prompt="hi").submission
    fence = journal.claim("s", WorkerIdentity("h", 1), ttl_s=TTL)
    assert fence is not None

    renewals = 0
    renewed = threading.Event()
    stop = threading.Event()

    def renew() -> None:
        nonlocal renewals
        while not stop.is_set():
            journal.heartbeat(fence, ttl_s=TTL)
            renewals += 1
            renewed.set()

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        assert renewed.wait(30)
        held.hold = True

        collided: list[bool] = []

        def let_go() -> None:
            # Once the transition has read, give the renewer room to commit over its reads
            # (no renewal may land: it waits at the gate), then let the transition commit.
            assert held.held.wait(30)
            renewed.clear()
            collided.append(renewed.wait(0.5))
            held.release.set()

        releaser = threading.Thread(target=let_go)
        releaser.start()
        start = journal.begin_attempt(fence, sub.id, worker="w")
        releaser.join()
        held.hold = False
        after = renewals
        renewed.clear()
        assert renewed.wait(30)  # the renewals go on once it committed
    finally:
        stop.set()
        renewer.join(30)
    assert collided == [False]  # no renewal committed between its reads and its commit
    # At most one renewal can already be past the gate as the transition starts, and make
    # it run again once; every later renewal waits for it (the collisions checked above).
    assert held.runs <= 2
    assert start.attempt.status.value == "running"
    assert renewals > after
    session = store.read(lambda v: v.get_session("s"))
    assert session is not None and session.lease.token == fence.token
