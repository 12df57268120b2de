"""``fxdurable worker --no-fork`` (issue 10, the warm worker): RQ's SimpleWorker runs each job
in the worker process, in one warm context (store, event loop, queue client, wake handler)
kept from job to job. A warm stop still ends the turn at its next step boundary; a SIGKILL of
the worker kills the turn with it, and the lease and recovery handle that as any crash.

Real Redis, real ``python -m fxdurable worker --no-fork`` processes.
"""

from __future__ import annotations

import signal
import time

import pytest
from rq_support import RqHarness

from tests.kit.story import done_text
from tests.kit.world import assert_invariants, assert_model_requests

pytestmark = pytest.mark.redis

NO_FORK = ("--no-fork",)


def test_a_no_fork_worker_runs_turns_in_its_own_process_and_stops_warm(
    rq_harness: RqHarness,
) -> None:
    h = rq_harness
    worker = h.start_worker(args=NO_FORK, env={"FXD_TEST_READ_S": "0.8"})
    first = h.submit_one("s1", "story basic", "req-1")
    (sub,) = h.wait_settled([first], timeout=30)
    assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
    assert sub.result_text == done_text("basic")

    # A second session's turn: the same process again, no work horse forked for either.
    second = h.submit_one("s2", "story graceful", "req-2")
    h.wait_event("s2", lambda e: e.type == "tool.started" and e.data.get("tool") == "read_state")
    assert worker.horses() == []
    # One warm context served both jobs: made once, for the worker's own pid.
    assert worker.log().count("warm context of process") == 1, worker.log()
    assert f"warm context of process {worker.pid} ready" in worker.log()
    sent = time.monotonic()
    assert worker.stop(signal.SIGTERM, timeout=15) == 0, worker.log()
    assert time.monotonic() - sent < 0.8 + 5.0
    assert "Traceback" not in worker.log(), worker.log()
    world = h.world()
    assert set(world.attempt_pids("req-1")) == set(world.attempt_pids("req-2")) == {worker.pid}

    # The SIGTERM reached the turn in the worker process: it stopped at the step boundary.
    events = h.events("s2")
    yielded = [e for e in events if e.type == "attempt.yielded"]
    assert [e.data.get("reason") for e in yielded] == ["SIGTERM"], [e.type for e in events]
    assert events[-1].type == "attempt.yielded", "the worker wrote after it yielded"

    h.start_worker(args=NO_FORK)
    (sub,) = h.wait_settled([second], timeout=30)
    assert sub.status == "completed" and sub.interruptions == 0, (sub, h.diagnostics())
    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["req-1", "req-2"])
    assert_model_requests(world)
    read = world.task("read_state", "req-2")
    assert read.status == "completed" and read.runs == 1


def test_a_sigkilled_no_fork_workers_turn_is_recovered_by_another(rq_harness: RqHarness) -> None:
    h = rq_harness
    doomed = h.start_worker(args=NO_FORK, env={"FXD_CRASH_AT": "tool.after-execute:deploy"})
    sub_id = h.submit_one("s1", "story killed", "req-1")
    assert doomed.proc.wait(timeout=30) == -signal.SIGKILL, doomed.log()
    assert "crash injected at tool.after-execute:deploy" in doomed.log()

    rescuer = h.start_worker(args=NO_FORK)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
    assert sub.interruptions == 1, sub
    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["req-1"])
    assert world.attempt_pids("req-1") == [doomed.pid, rescuer.pid]
    # The deploy took effect once, in the killed worker, and was never repeated blindly.
    assert len(world.effects_of("deploy")) == 1
    assert world.task("deploy", "req-1").status == "outcome_unknown"
