"""Redis restarted mid-run with AOF on: no admitted submission is lost (issue 4), and busy
workers ride an outage out without exiting or orphaning a work horse (issue 9).

One dedicated redis-server (``appendfsync always``) holds both the store and the RQ queue. It is
SIGKILLed while workers run turns, restarted from its AOF on the same port, and every
submission admitted before the kill must still settle exactly once, with the invariants intact.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_support import RqHarness, WorkerProc, proc_identity, wait_until

from tests.kit.world import SETTLED, assert_invariants, read_world

pytestmark = [pytest.mark.redis, pytest.mark.crash]

# Longer than the lease (3 s: every lease expires in it) and than RQ's job-monitor period (5 s:
# every busy horse meets a monitor tick in it), which is all the outage has to be.
OUTAGE_S = 6.0


def test_redis_killed_and_restarted_mid_run_loses_no_submission(
    tmp_path: Path, redis_factory: Callable[..., object]
) -> None:
    server = redis_factory(fsync="always")
    store_url = f"{server.url}/0?prefix=t{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
    harness = RqHarness(
        tmp_path / "h",
        store_url=store_url,
        redis_port=server.port,  # type: ignore[attr-defined]
        redis_db=1,
        lease_ttl_s=3.0,
    )
    try:
        harness.start_workers(2, env={"FXD_TEST_TOOL_S": "0.3"})
        items = [(f"s{n}", f"story {n}", f"restart-{n}") for n in range(6)]
        ids = harness.submit(items)
        time.sleep(0.8)  # turns are mid-flight: tools sleep 0.3 s each
        in_flight = harness.read(lambda v: [v.get_submission(i) for i in ids])
        assert any(s is not None and s.status not in SETTLED for s in in_flight), (
            "every turn finished before the kill: the test would prove nothing"
        )
        server.restart(signal.SIGKILL)  # type: ignore[attr-defined]
        # The workers ride the restart out; their reconciliation scan finds whatever the
        # crash left behind.
        assert all(w.alive() for w in harness.workers), harness.diagnostics()
        subs = harness.wait_settled(ids, timeout=90)
        assert all(s.status in SETTLED for s in subs)
        harness.stop_workers()
        world = read_world(harness.store_url, harness.world_dir)
        assert {s.request_id for s in world.submissions} == {r for _, _, r in items}
        assert_invariants(world, [r for _, _, r in items])
    finally:
        harness.cleanup()


class HorseWatch:
    """Samples every worker's horses from /proc until stopped, so a horse seen once is known
    by identity (pid, start time) even if it outlives its worker."""

    def __init__(self, harness: RqHarness) -> None:
        self._harness = harness
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="horse-watch")

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for worker in list(self._harness.workers):
                worker.horses()

    def __enter__(self) -> HorseWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def living_horses(workers: list[WorkerProc]) -> dict[str, list[int]]:
    """The horses ever seen that still run (the very process: pid and start time)."""
    return {
        w.name: alive
        for w in workers
        if (alive := [pid for pid, start in w.horses_seen if proc_identity(pid) == (pid, start)])
    }


@pytest.mark.timeout(180)  # the outage, then recovery, on two loaded cores
@pytest.mark.parametrize("store", ["redis", "sqlite"])
def test_busy_workers_ride_out_a_redis_outage(
    tmp_path: Path, redis_factory: Callable[..., object], store: str
) -> None:
    """Redis (the queue, and with ``store=redis`` the store too) SIGKILLed for 6 s while three
    workers run turns, then restarted from its AOF: every worker stays up, every submission
    settles once, and no work horse outlives its worker."""
    server = redis_factory(fsync="always")
    store_url = (
        f"{server.url}/0?prefix=t{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
        if store == "redis"
        else f"sqlite:///{tmp_path.resolve()}/store.db"
    )
    harness = RqHarness(
        tmp_path / "h",
        store_url=store_url,
        redis_port=server.port,  # type: ignore[attr-defined]
        redis_db=1,
    )
    try:
        # Each worker first takes a turn of 8 ticks of 2 s: every horse outlasts the outage
        # and meets RQ's job monitor (every 5 s) in it. Story turns queue behind them.
        env = {"FXD_TEST_TOOL_S": "0.3", "FXD_TEST_TICK_S": "2.0"}
        workers = harness.start_workers(3, env=env)
        items = [(f"t{n}", f"ticks 8 long-{n}", f"outage-t{n}") for n in range(3)]
        items += [(f"s{n}", f"story {n}", f"outage-s{n}") for n in range(3)]
        with HorseWatch(harness):
            ids = harness.submit(items)
            wait_until(lambda: all(w.horses() for w in workers), 30, "every worker to run a turn")
            server.stop(signal.SIGKILL)  # type: ignore[attr-defined]
            time.sleep(OUTAGE_S)
            port = server.port  # type: ignore[attr-defined]
            server.start()  # type: ignore[attr-defined]
            assert server.port == port  # type: ignore[attr-defined]
            exited = [w.name for w in workers if not w.alive()]
            assert not exited, f"workers {exited} exited in the outage:\n{harness.diagnostics()}"
            subs = harness.wait_settled(ids, timeout=90)
        assert all(s.status in SETTLED for s in subs)
        assert all(w.alive() for w in workers), harness.diagnostics()
        assert harness.stop_workers() == [0, 0, 0], harness.diagnostics()
        assert not living_horses(workers), harness.diagnostics()
        world = read_world(harness.store_url, harness.world_dir)
        assert_invariants(world, [r for _, _, r in items])
    finally:
        harness.cleanup()


WAITING = "waiting for Redis before taking wakes"


@pytest.mark.slow  # two of its lines, 5 s apart
def test_a_worker_started_while_redis_is_down_waits_for_it(
    tmp_path: Path, redis_factory: Callable[..., object]
) -> None:
    """Redis (queue and store) is down when ``fxdurable worker`` starts: the worker says it
    waits, every few seconds, stays up, and once Redis is started (late) it reconciles and
    takes wakes. It once exited with status 2, while a running worker rode out the same
    outage."""
    server = redis_factory(fsync="always")
    port = server.port  # type: ignore[attr-defined]
    store_url = f"{server.url}/0?prefix=t{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
    server.stop()  # type: ignore[attr-defined]
    harness = RqHarness(tmp_path / "h", store_url=store_url, redis_port=port, redis_db=1)
    try:
        worker = harness.start_worker(ready=False)
        wait_until(lambda: worker.log().count(WAITING) >= 2, 30, "two waiting lines")
        assert worker.alive(), worker.log()
        assert "Traceback" not in worker.log() and "cannot reach the RQ Redis" in worker.log()
        server.start()  # type: ignore[attr-defined]
        assert server.port == port  # type: ignore[attr-defined]
        worker.wait_ready(timeout=30)
        items = [("late", "story late", "late-1")]
        (sub,) = harness.wait_settled(harness.submit(items), timeout=60)
        assert sub.status == "completed", sub
        assert harness.stop_workers() == [0], harness.diagnostics()
        assert_invariants(read_world(harness.store_url, harness.world_dir), ["late-1"])
    finally:
        harness.cleanup()


def test_connect_timeout_makes_a_worker_give_up_on_a_redis_that_is_down(
    tmp_path: Path, redis_factory: Callable[..., object]
) -> None:
    server = redis_factory()
    port = server.port  # type: ignore[attr-defined]
    server.stop()  # type: ignore[attr-defined]
    harness = RqHarness(
        tmp_path / "h",
        store_url=f"sqlite:///{tmp_path.resolve()}/store.db",
        redis_port=port,
        redis_db=1,
    )
    started = time.monotonic()
    code, out, err = harness.run_cli("worker", "--connect-timeout", "1.5")
    took = time.monotonic() - started
    assert code == 2, (code, out, err)
    assert "gave up after 1.5s (--connect-timeout)" in err, err
    assert f"cannot reach the RQ Redis at 127.0.0.1:{port}" in err, err
    assert "Traceback" not in err
    assert 1.5 <= took < 15, took  # the interpreter's start and imports, then 1.5 s of tries
