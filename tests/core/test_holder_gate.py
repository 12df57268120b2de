"""The holder gate (core/journal/_gate.py): one process's renewal of a session waits for the
transitions of it in flight when it arrived, never past its bound and never for later ones;
transitions never wait for a renewal. Threads meet on events; no test sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable

from fxdurable.core.journal._gate import HolderGate

WAIT = 10.0  # an event's bound, reached only when the gate is broken


def _thread(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def test_a_renewal_waits_for_the_transition_in_flight() -> None:
    gate = HolderGate()
    order: list[str] = []
    inside, let_go = threading.Event(), threading.Event()

    def first() -> None:
        with gate.transition("s"):
            inside.set()
            assert let_go.wait(WAIT)
            order.append("first ends")

    t = _thread(first)
    assert inside.wait(WAIT)
    renewed = threading.Event()

    def renew() -> None:
        assert gate.renewal("s", wait_s=WAIT)
        order.append("renewal")
        renewed.set()

    r = _thread(renew)
    # While the first is inside, the renewal waits (bounded: it would say False).
    assert not renewed.wait(0.2)
    let_go.set()
    assert renewed.wait(WAIT)
    for th in (t, r):
        th.join(WAIT)
    assert order == ["first ends", "renewal"]
    assert gate._in_flight == {}


def test_a_renewal_stops_waiting_at_its_bound() -> None:
    gate = HolderGate()
    inside, let_go = threading.Event(), threading.Event()

    def hung() -> None:  # a transition in a store that does not answer
        with gate.transition("s"):
            inside.set()
            assert let_go.wait(WAIT)

    t = _thread(hung)
    assert inside.wait(WAIT)
    assert gate.renewal("s", wait_s=0.05) is False
    with gate.transition("s"):  # a transition is never held back
        pass
    let_go.set()
    t.join(WAIT)
    assert gate._in_flight == {}


def test_sessions_are_apart_and_a_renewal_counts_as_a_transition_of_its_own() -> None:
    gate = HolderGate()
    with gate.transition("other"):
        assert gate.renewal("s", wait_s=WAIT)  # nothing of "s" in flight: at once
    assert gate.renewal("s", wait_s=WAIT)
    with gate.transition("s"):  # the renewal's own transaction, after its wait
        pass
    assert gate._in_flight == {}


def test_back_to_back_renewals_do_not_hold_a_transition_up() -> None:
    gate = HolderGate()
    stop, renewed = threading.Event(), threading.Event()

    def renew_forever() -> None:
        while not stop.is_set():
            gate.renewal("s", wait_s=WAIT)
            renewed.set()

    r = _thread(renew_forever)
    assert renewed.wait(WAIT)
    done = threading.Event()

    def transition() -> None:
        with gate.transition("s"):
            done.set()

    t = _thread(transition)
    assert done.wait(WAIT)
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
    assert gate.renewal("s", wait_s=WAIT)  # the ones before it ended; later ones do not count
    stop.set()
    for w in workers:
        w.join(WAIT)
    assert gate._in_flight == {}
