"""A work horse never outlives its worker (issue 22 §4): SIGKILL the RQ worker (the parent, not
the horse) mid-deploy, and the horse dies with it (``PR_SET_PDEATHSIG``), instead of running
its unsafe deploy to its end behind a lease the next worker takes over once the horse's pid
is gone... which, while the horse lived on, it never was: the lease waited out its TTL and the
orphan's deploy took effect beside the recovery.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import pytest
from rq_support import RqHarness, parse_worker_pid, pid_alive, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

SESSION = "s"
REQUEST = "orphan-1"


def test_a_horse_dies_with_its_sigkilled_worker(make_harness: Callable[..., RqHarness]) -> None:
    h = make_harness(lease_ttl_s=2.0, heartbeat_s=0.5)
    doomed = h.start_worker(env={"FXD_TEST_DEPLOY_S": "60"})
    sub_id = h.submit_one(SESSION, "story orphan", REQUEST)
    h.wait_event(SESSION, lambda e: e.type == "tool.started" and e.data.get("tool") == "deploy")
    (started,) = [e for e in h.events(SESSION) if e.type == "attempt.started"]
    horse = parse_worker_pid(started.data["worker"])
    assert doomed.horses() == [horse]

    os.kill(doomed.pid, signal.SIGKILL)  # the worker only: its horse is not signalled by us
    doomed.proc.wait()
    wait_until(lambda: not pid_alive(horse), 10, "the horse to die with its worker")

    h.start_worker()
    (sub,) = h.wait_settled([sub_id], timeout=60)
    assert sub.status == "completed", (sub, h.diagnostics())
    world = h.world()
    deploy = world.task("deploy", REQUEST)
    assert (deploy.status, deploy.runs) == ("outcome_unknown", 1), deploy
    assert world.effects_of("deploy") == []  # the horse died before its effect
