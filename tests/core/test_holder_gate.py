"""The holder gate (core/journal/_gate.py): one process's renewals of a session wait for its
transitions in flight, hold new ones back while they commit, never wait past their bound,
and neither side starves the other. Threads meet on events; no test sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable

from fxdurable.core.journal._gate import HolderGate

WAIT = 10.0  # an event's bound, reached only when the gate is broken


def _thread(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def _registered(gate: HolderGate, renewals: int) -> bool:
    """Wait (bounded) until ``renewals`` renewals of "s" wait at the gate."""
    tick = threading.Event()
    for _ in range(int(WAIT / 0.001)):
        with gate._cond:
            state = gate._sessions.get("s")
            if state is not None and len(state.renewals) == renewals:
                return True
        tick.wait(0.001)
    return False


def test_a_renewal_waits_for_the_transition_in_flight_and_then_holds_new_ones() -> None:
    gate = HolderGate()
    order: list[str] = []
    inside, let_go, renewing, second_waits = (threading.Event() for _ in range(4))

    def first() -> None:
        with gate.transition("s"):
            inside.set()
            assert let_go.wait(WAIT)
            order.append("first ends")

    def renew() -> None:
        with gate.renewal("s", wait_s=WAIT) as gated:
            order.append(f"renewal gated={gated}")
            renewing.set()
            assert second_waits.wait(WAIT)

    def second() -> None:
        with gate.transition("s"):
            order.append("second")

    t1 = _thread(first)
    assert inside.wait(WAIT)
    r = _thread(renew)
    # The renewal waits while the first transition is inside: release it, and the
    # renewal goes in; the second transition then waits for it.
    assert _registered(gate, 1) and not renewing.is_set()
    let_go.set()
    assert renewing.wait(WAIT)
    t2 = _thread(second)
    second_waits.set()
    for t in (t1, r, t2):
        t.join(WAIT)
    assert order == ["first ends", "renewal gated=True", "second"]
    assert gate._sessions == {}


def test_a_renewal_stops_waiting_at_its_bound_and_holds_nothing_back() -> None:
    gate = HolderGate()
    inside, let_go = threading.Event(), threading.Event()

    def hung() -> None:  # a transition in a store that does not answer
        with gate.transition("s"):
            inside.set()
            assert let_go.wait(WAIT)

    t = _thread(hung)
    assert inside.wait(WAIT)
    with gate.renewal("s", wait_s=0.05) as gated:
        assert gated is False
        with gate.transition("s"):  # another transition is not held back by it
            pass
    let_go.set()
    t.join(WAIT)
    assert gate._sessions == {}


def test_a_renewal_s_own_transaction_passes_inside_it() -> None:
    gate = HolderGate()
    with gate.renewal("s", wait_s=WAIT) as gated:
        assert gated
        with gate.transition("s"):  # the renewal is a transition too: no deadlock
            pass
    with gate.renewal("other", wait_s=WAIT), gate.transition("s"):
        pass  # sessions are apart
    assert gate._sessions == {}


def test_back_to_back_renewals_do_not_starve_a_transition() -> None:
    gate = HolderGate()
    stop, renewed = threading.Event(), threading.Event()

    def renew_forever() -> None:
        while not stop.is_set():
            with gate.renewal("s", wait_s=WAIT):
                renewed.set()

    r = _thread(renew_forever)
    assert renewed.wait(WAIT)
    done = threading.Event()

    def transition() -> None:
        with gate.transition("s"):
            done.set()

    t = _thread(transition)
    assert done.wait(WAIT)  # it came before the next renewal, so it passed first
    stop.set()
    for th in (r, t):
        th.join(WAIT)


def test_a_stream_of_transitions_does_not_starve_a_renewal() -> None:
    gate = HolderGate()
    stop, passing = threading.Event(), threading.Event()

    def overlapping_transitions() -> None:
        # Two threads whose transitions overlap, so one is always in flight.
        while not stop.is_set():
            with gate.transition("s"):
                passing.set()

    workers = [_thread(overlapping_transitions) for _ in range(2)]
    assert passing.wait(WAIT)
    with gate.renewal("s", wait_s=WAIT) as gated:
        assert gated  # the ones before it finished, the ones after it waited
    stop.set()
    for w in workers:
        w.join(WAIT)
    assert gate._sessions == {}
