"""A sync call left running by its ``timeout_s`` or an abort: the lease is not let go until it
ends (docs/leases.md "A call left running holds the lease").

Embedded Runtimes on one SQLite file, each its own process. The first runs turn 1, whose
blocking deploy outlives its call: it times out (a sync tool, or a durable tool's sync
``ctx.step``) or is aborted (an unsafe tool, and one declared safe), and turn 1 settles while
the deploy's thread still runs, its effect a few seconds away. A third process then submits
turn 2, ``ensure``: the model checks the ledger and deploys if the effect is absent.

Before: turn 1's run released the lease as it ended; turn 2 ran at once (in whichever process
took it), truthfully found no effect, deployed, and then the old thread's effect landed too:
two effects of one operation. Now the first process keeps the lease, renewed, until that
thread has ended: turn 2 runs after, finds the effect and does not deploy.

And a graceful shutdown whose grace runs out while a sync tool runs: the run is torn down with
its lease kept unrenewed, and the guard ends the process at the stop deadline, before the
other process may take the session over (this held before too).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq_support import pid_alive, wait_until
from test_lost_lease_effects import LEASE_WORLD, EmbeddedHarness, EmbeddedSqlite

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.runtime.leases import LOST_LEASE_EXIT_STATUS
from tests.kit import lease_world

pytestmark = pytest.mark.slow

SESSION = "s"
DEPLOY_S = 4.0  # the stale deploy's effect comes this long after it starts


@contextlib.contextmanager
def _world(tmp_path: Path, deploy_s: float = DEPLOY_S, **env: str) -> Iterator[EmbeddedHarness]:
    h = EmbeddedSqlite(tmp_path).harness
    assert isinstance(h, EmbeddedHarness)
    h.use_agents(
        LEASE_WORLD,
        lambda: lease_world.agents(h.world_dir, deploy_s),
        env={"FXD_TEST_WORLD": str(h.world_dir), "FXD_TEST_DEPLOY_S": str(deploy_s), **env},
    )
    try:
        yield h
    finally:
        h.cleanup()


def _request_abort(store_url: str) -> None:
    store = open_store(store_url)
    try:
        assert Journal(store, SystemClock(), RandomIds()).request_abort(SESSION)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("kind", "stop", "turn1_status"),
    [
        ("timeout", "timeout", "completed"),
        ("step", "timeout", "completed"),
        ("sync", "abort", "aborted"),
        ("safe", "abort", "aborted"),
    ],
)
def test_a_call_left_running_keeps_the_lease_until_it_ends(
    tmp_path: Path, kind: str, stop: str, turn1_status: str
) -> None:
    with _world(tmp_path) as h:
        _left_running(h, kind, stop, turn1_status)


def _left_running(h: EmbeddedHarness, kind: str, stop: str, turn1_status: str) -> None:
    op = f"op-{kind}-{stop}"
    h.start_embedded((SESSION, f"deploy {op} {kind}", "r-1"))
    world = h.world_dir
    (stale_id, stale_pid) = wait_until(
        lambda: next(iter(lease_world.calls(world, "start", op)), None), 30, "the deploy to start"
    )
    if stop == "abort":
        _request_abort(h.store_url)
    first = wait_until(
        lambda: h.read(lambda v: v.get_submission_by_request("r-1")), 10, "turn 1 admitted"
    )
    (sub1,) = h.wait_settled([first.id], timeout=30)
    assert sub1.status == turn1_status, (sub1, h.diagnostics())
    # Turn 1 has settled; its deploy's thread is still inside the call.
    assert lease_world.calls(world, "end", op) == [], "the deploy ended too soon to tell"

    h.start_embedded((SESSION, f"ensure {op}", "r-2"))  # another process asks again
    second = wait_until(
        lambda: h.read(lambda v: v.get_submission_by_request("r-2")), 10, "turn 2 admitted"
    )
    (sub2,) = h.wait_settled([second.id], timeout=60)
    wait_until(
        lambda: (stale_id, stale_pid) in lease_world.calls(world, "end", op),
        30,
        "the stale deploy to end",
    )
    effects = lease_world.effects(world, op)
    assert len(effects) == 1, (effects, h.diagnostics())
    assert effects[0][1] == stale_id, effects
    assert sub2.status == "completed", (sub2, h.diagnostics())
    assert "deployed already" in (sub2.result_text or ""), (sub2, h.diagnostics())

    exits = h.stop_workers(signal.SIGTERM, timeout=30)
    assert exits, "the runtimes were still running"
    settled = [e for e in h.events(SESSION) if e.type.startswith("submission.")]
    assert sorted(e.type for e in settled if e.type != "submission.admitted") == sorted(
        [f"submission.{turn1_status}", "submission.completed"]
    ), settled
    code, out, err = h.run_cli("check", "--store", h.store_url, "--at-rest")
    assert code == 0, (out, err)


def test_a_shutdown_past_its_grace_ends_the_process_before_the_lease_expires(
    tmp_path: Path,
) -> None:
    with _world(tmp_path, deploy_s=8.0, FXD_TEST_GRACE_S="0.3") as h:
        _shutdown_past_grace(h)


def _shutdown_past_grace(h: EmbeddedHarness) -> None:
    op = "op-shutdown"
    first = h.start_embedded((SESSION, f"deploy {op} sync", "r-1"))
    world = h.world_dir
    (stale_id, stale_pid) = wait_until(
        lambda: next(iter(lease_world.calls(world, "start", op)), None), 30, "the deploy to start"
    )
    assert stale_pid == first.pid
    h.start_embedded()  # the other process, which recovers the turn
    first.proc.send_signal(signal.SIGTERM)
    status = first.proc.wait(timeout=30)
    assert status == LOST_LEASE_EXIT_STATUS, (status, first.log())
    found = h.read(lambda v: v.get_submission_by_request("r-1"))
    (sub,) = h.wait_settled([found.id], timeout=60)
    assert sub.status == "completed" and sub.interruptions >= 1, (sub, h.diagnostics())
    effects = lease_world.effects(world, op)
    assert len(effects) == 1 and effects[0][2] != stale_pid, (effects, h.diagnostics())
    assert not pid_alive(stale_pid)
    assert (stale_id, stale_pid) not in lease_world.calls(world, "end", op)
    h.stop_workers(signal.SIGTERM, timeout=30)
    code, out, err = h.run_cli("check", "--store", h.store_url, "--at-rest")
    assert code == 0, (out, err)
