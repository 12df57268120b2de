"""``fxdurable worker`` runs turns submitted from a Runtime in RQ mode (issue 4, items 2-3).

A real Redis, real ``python -m fxdurable worker`` processes (stock RQ forking a work horse per
job), turns admitted by ``fx.Runtime(agents, store=..., queue="rq://...")`` in this process,
which only admits and enqueues. Also: continuations through a short RQ job timeout, a warm
shutdown stopping the turn at a step boundary, and clear errors for a bad configuration.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_support import RqHarness, print_measure, wait_until

from fxdurable.testing.net import free_port
from tests.kit.story import done_text
from tests.kit.world import assert_invariants, assert_model_requests

pytestmark = pytest.mark.redis

SESSION = "s-off"
AFTER_ADMIT = "submission.after-admit"


def test_a_turn_submitted_from_a_runtime_is_run_by_a_worker(rq_harness: RqHarness) -> None:
    h = rq_harness
    worker = h.start_worker()
    started = time.monotonic()
    sub_id = h.submit_one("s1", "story basic", "req-1")
    (sub,) = h.wait_settled([sub_id], timeout=30)
    print_measure("submit to settled, one worker", time.monotonic() - started)
    assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
    assert sub.result_text == done_text("basic")

    # The turn ran in the worker's forked work horse, not in this process.
    world = h.world()
    (pid,) = set(world.attempt_pids("req-1"))
    assert pid != worker.pid
    assert {p for *_x, p in world.calls} == {pid}
    assert "fxdurable wake s1 (submitted)" in worker.log()

    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["req-1"])
    assert_model_requests(world)
    assert [t.status for t in world.tasks] == ["completed"] * 3
    assert sorted(world.effects_of("deploy")) == [world.task("deploy", "req-1").execution_id]

    # The store audits clean from the CLI too, with every worker stopped.
    code, out, err = h.run_cli("check", "--store", h.store_url, "--at-rest")
    assert code == 0, (code, out, err)


@pytest.mark.slow
def test_a_long_turn_completes_through_continuations(
    make_harness: Callable[..., RqHarness],
) -> None:
    """RQ job timeout 10 s (the minimum): each job keeps a fifth as margin, so it stops at the
    first step boundary after 8 s, commits, enqueues a continuation and lets go. Six ticks of
    2.8 s need three invocations; each continuation is visible in the trace."""
    h = make_harness(job_timeout=10)
    h.start_worker(env={"FXD_TEST_TICK_S": "2.8"})
    sub_id = h.submit_one("s1", "ticks 6 long", "req-1")
    (sub,) = h.wait_settled([sub_id], timeout=40)
    assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
    assert sub.result_text == "Ticked 6 times: long"
    assert sub.interruptions == 0

    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["req-1"])
    assert_model_requests(world)
    yielded = world.events_of("attempt.yielded")
    assert len(yielded) >= 2, [e.type for e in world.events]
    assert {e.data.get("reason") for e in yielded} == {"deadline"}
    attempts = world.attempts[sub.id]
    assert [a.status for a in attempts] == ["yielded"] * (len(attempts) - 1) + ["finished"]
    assert not world.events_of("attempt.interrupted")
    # Three invocations: three work horses (RQ forks one per job).
    assert len(set(world.attempt_pids("req-1"))) == len(attempts) >= 3
    # Each tick ran once: a continuation resumes from the last committed step.
    ticks = world.calls_of("tick")
    assert len(ticks) == 6 and all(run == 1 for _eid, run in ticks), ticks

    trace = h.trace("s1")
    assert trace.count("yielded (deadline); continuing") == len(yielded), trace


def test_warm_shutdown_stops_the_turn_at_a_step_boundary(rq_harness: RqHarness) -> None:
    """SIGTERM to ``fxdurable worker`` mid-tool: the worker forwards it to the horse as SIGUSR1,
    the turn stops at the next step boundary (an ``attempt.yielded``), the worker exits 0 as soon
    as the tool returns, and a new worker finishes the turn with no interruption recorded."""
    h = rq_harness
    first = h.start_worker(env={"FXD_TEST_READ_S": "1.5"})
    sub_id = h.submit_one("s1", "story graceful", "req-1")
    h.wait_event("s1", lambda e: e.type == "tool.started" and e.data.get("tool") == "read_state")
    sent = time.monotonic()
    code = first.stop(signal.SIGTERM, timeout=15)
    took = time.monotonic() - sent
    print_measure("warm shutdown mid-tool (1.5 s tool) to worker exit", took)
    assert code == 0, first.log()
    assert took < 1.5 + 5.0, f"the worker took {took:.1f}s to stop"
    assert "Traceback" not in first.log(), first.log()

    events = h.events("s1")
    yielded = [e for e in events if e.type == "attempt.yielded"]
    assert len(yielded) == 1, [e.type for e in events]
    assert yielded[0].data.get("reason") == "SIGUSR1", yielded  # forwarded by the parent
    assert events[-1].type == "attempt.yielded", "the horse wrote after it yielded"
    sub = h.read(lambda v: v.get_submission(sub_id))
    assert sub.status == "running"  # stopped at a boundary, not settled, not lost

    h.start_worker()
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
    assert sub.interruptions == 0
    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["req-1"])
    assert_model_requests(world)
    assert not world.events_of("attempt.interrupted")
    assert [a.status for a in world.attempts[sub.id]] == ["yielded", "finished"]
    # The tool in flight at the SIGTERM finished and was recorded once, never re-run.
    read = world.task("read_state", "req-1")
    assert read.status == "completed" and read.runs == 1
    assert len(world.calls_of("read_state")) == 1
    # Two jobs, two horses: the one SIGTERM stopped, and the fresh worker's.
    assert len(set(world.attempt_pids("req-1"))) == 2


# -- a bad configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"FXD_AGENTS": "no_such_module_fxd:agents"},
            "no module named 'no_such_module_fxd' (from FXD_AGENTS=no_such_module_fxd:agents) in",
            id="agents-module-missing",
        ),
        pytest.param(
            {"FXD_AGENTS": "{module}:no_such_attribute"},
            "has no attribute 'no_such_attribute'",
            id="agents-attribute-missing",
        ),
        pytest.param(
            {"FXD_AGENTS": "{module}:AGENT"},
            "must name an Agent or a list of Agents",
            id="agents-not-agents",
        ),
        pytest.param(
            {"FXD_AGENTS": "just-a-name"},
            "FXD_AGENTS must look like 'package.module:agents'",
            id="agents-malformed",
        ),
        pytest.param({"FXD_STORE": None}, "worker needs --store", id="store-missing"),
        pytest.param(
            {"FXD_QUEUE": None, "FXD_AGENTS": None},
            "worker needs --queue, --agents",
            id="queue-and-agents-missing",
        ),
        pytest.param(
            {"FXD_QUEUE": "local"},
            "needs an rq://, sqs:// or postgresql:// --queue",
            id="queue-not-rq",
        ),
        pytest.param(
            {"FXD_QUEUE": "rq://127.0.0.1:1/0?queue=q&job_timeout=5"},
            "job_timeout must be at least 10 seconds",
            id="job-timeout-too-short",
        ),
        pytest.param(
            {"FXD_QUEUE": "rq://127.0.0.1:1/0?queue=q&color=blue"},
            "unknown RQ URL options ['color']",
            id="queue-option-unknown",
        ),
        pytest.param(
            {"FXD_LEASE_TTL_S": "soon"},
            "FXD_LEASE_TTL_S must be a number of seconds",
            id="lease-ttl-not-a-number",
        ),
        pytest.param(
            {"FXD_LEASE_TTL_S": "1", "FXD_HEARTBEAT_S": "2"},
            "the heartbeat must be shorter than the lease TTL",
            id="heartbeat-longer-than-ttl",
        ),
    ],
)
def test_a_bad_configuration_exits_with_a_clear_message(
    rq_harness: RqHarness, env: dict[str, str | None], message: str
) -> None:
    h = rq_harness
    env = {k: v.format(module=h.module) if v else v for k, v in env.items()}
    started = time.monotonic()
    code, out, err = h.run_cli("worker", "--burst", env=env, timeout=20)
    assert code != 0, (code, out, err)
    assert message in err, err
    assert err.startswith("fxdurable: "), err
    assert "Traceback" not in err, err
    assert time.monotonic() - started < 15, "a bad configuration must fail fast"


def test_warm_shutdown_while_the_horse_starts_up(rq_harness: RqHarness) -> None:
    """SIGTERM while the job's horse is still loading the application (before it reaches the
    turn loop): the forwarded SIGUSR1 must not kill the horse. It has claimed nothing yet, so
    it may simply stop; the wake is then recovered by the next worker's reconciliation."""
    h = rq_harness
    first = h.start_worker(env={"FXD_TEST_AGENTS_DELAY_S": "1.5"}, ready=False)
    first.wait_ready(timeout=30)
    sub_id = h.submit_one("s1", "story early", "req-1")
    wait_until(lambda: "fxdurable wake s1 (submitted)" in first.log(), 10, "the job to start")
    wait_until(first.horses, 5, "the horse")
    code = first.stop(signal.SIGTERM, timeout=15)
    assert code == 0, first.log()

    # Nothing is lost either way: the next worker's reconciliation finds the work.
    h.start_worker()
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed" and sub.interruptions == 0, sub
    assert h.stop_workers() == [0]
    assert_invariants(h.world(), ["req-1"])
    log = first.log()
    assert "Work-horse terminated unexpectedly" not in log, (
        "the horse died of the SIGUSR1 the warm shutdown forwarded to it:\n" + log
    )


def test_an_unreachable_redis_exits_with_a_clear_message(rq_harness: RqHarness) -> None:
    """The queue's Redis is down and ``--connect-timeout`` says not to wait for it (without it
    the worker waits, tests/workers/test_rq_redis_restart.py): a clear one-line error and a
    non-zero exit once the timeout has passed, no traceback."""
    h = rq_harness
    port = free_port()  # nothing listens on it
    queue = f"rq://127.0.0.1:{port}/0?queue=q"
    code, out, err = h.run_cli(
        "worker", "--burst", "--connect-timeout", "1", env={"FXD_QUEUE": queue}, timeout=30
    )
    assert code != 0, (code, out, err)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("fxdurable: gave up after 1s") and f"127.0.0.1:{port}" in last, err


def test_stock_rq_worker_runs_fxdurable_wakes(rq_harness: RqHarness) -> None:
    """The documented alternative: a plain ``rq worker`` process runs our jobs (with
    ``fxdurable scan`` beside it for recovery)."""
    h = rq_harness
    sub_id = h.submit_one("s1", "story stock", "req-stock")
    rq_bin = Path(sys.executable).with_name("rq")
    done = subprocess.run(
        [str(rq_bin), "worker", "--burst", "--url", h.redis_url, h.queue_name],
        cwd=h.root,
        env=h.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (sub,) = h.wait_settled([sub_id], timeout=10)
    assert sub.status == "completed", (sub.status, sub.error, done.stderr)
    assert_invariants(h.world(), ["req-stock"])


def test_scan_interval_0_turns_the_reconciliation_scan_off(rq_harness: RqHarness) -> None:
    """``--scan-interval 0`` means no scan, as on the SQS and Postgres workers. It used to
    scan without a pause: a pool started so (tests/workers/test_rq_coding_agent.py) woke a
    session the moment its horse was SIGKILLed, and the dead horse's parent could take that
    wake in the moment before the test killed it too, an interruption the test never made.

    An orphan (admitted, its wake never sent) is there before the worker starts, with no quiet
    period: a startup scan (before the worker listens) or a periodic one would wake it. Only
    ``fxdurable scan``'s wake may reach the worker. A negative interval is refused."""
    h = rq_harness
    code, out, err = h.run_submitter(SESSION, "story quiet", "req-off", crash_at=AFTER_ADMIT)
    assert code == -signal.SIGKILL, (code, out, err)
    worker = h.start_worker(scan_interval_s=0, env={"FXD_SCAN_QUIET_S": "0"})
    code, out, err = h.run_cli("scan")
    assert (code, out.strip()) == (0, "woke 1 session(s)"), (code, out, err)
    (sub_id,) = h.read(lambda v: [s.id for s in v.submissions(SESSION)])
    (sub,) = h.wait_settled([sub_id])
    assert sub.status == "completed" and sub.interruptions == 0, sub
    assert h.stop_workers() == [0]
    log = worker.log()
    assert re.findall(r": fxdurable wake \S+ \((\w+)\) \(", log) == ["reconcile"], log
    assert "reconciliation" not in log, log

    code, out, err = h.run_cli("worker", "--burst", "--scan-interval", "-1", timeout=20)
    assert code != 0 and "--scan-interval must be 0 (off) or a number of seconds" in err, err
