"""Fencing across processes (issue 4, item 4; DESIGN §3.9): the SIGSTOP/SIGCONT zombie.

A work horse is paused with SIGSTOP in the middle of a slow unsafe ``deploy``, past its lease
TTL. It is alive, so no one may take the dead-pid shortcut: another worker's scan finds the
expired lease, takes it over (a new fencing token), records the deploy ``outcome_unknown`` and
finishes the turn. Then the paused horse is resumed: it must write nothing to the store; its
heartbeat or ``finish_tool`` meets the stale token (``LeaseLostError``). A frozen process is the
one case the lost-lease guarantee cannot cover (docs/leases.md): on SIGCONT its lease guard
finds the run's stop deadline long past and ends the horse (status 75), racing the deploy's own
thread, which wakes at the same moment: the zombie's deploy may or may not take effect, once
at most.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
from rq_support import (
    RqHarness,
    freeze_outside_a_commit,
    parse_worker_pid,
    pid_alive,
    print_measure,
    proc_stat,
    wait_until,
)

from tests.kit.world import assert_invariants, assert_model_requests

pytestmark = pytest.mark.redis

SESSION = "s"
REQUEST = "fence-1"
LEASE_TTL_S = 2.0


def test_a_paused_worker_resumed_after_a_takeover_writes_nothing(
    make_harness: Callable[..., RqHarness],
) -> None:
    h = make_harness(lease_ttl_s=LEASE_TTL_S, heartbeat_s=0.5)
    paused = h.start_worker(env={"FXD_TEST_DEPLOY_S": "3"})
    sub_id = h.submit_one(SESSION, "story fence", REQUEST)
    h.wait_event(SESSION, lambda e: e.type == "tool.started" and e.data.get("tool") == "deploy")

    # The horse running the deploy: the attempt.started event names it (host:pid), and it is
    # the paused worker's forked child.
    (started,) = [e for e in h.events(SESSION) if e.type == "attempt.started"]
    horse = parse_worker_pid(started.data["worker"])
    assert paused.horses() == [horse], (paused.horses(), horse)
    freeze_outside_a_commit(horse, h.store_url)
    stopped_at = time.time()

    # A second worker: the lease holder is alive (stopped), so it waits for expiry.
    taker = h.start_worker()
    (sub,) = h.wait_settled([sub_id], timeout=30)
    took_over = (sub.settled_at or 0.0) - stopped_at
    print_measure(f"takeover of a paused (live) holder, lease TTL {LEASE_TTL_S:g}s", took_over)
    assert sub.status == "completed", (sub.status, sub.error, h.diagnostics())
    assert took_over >= LEASE_TTL_S - 0.6, "the lease of a live holder was taken early"
    assert pid_alive(horse) and (proc_stat(horse) or ("?",))[0] == "T"

    before = h.world()
    deploy = before.task("deploy", REQUEST)
    assert deploy.status == "outcome_unknown" and deploy.runs == 1, deploy
    (unknown,) = before.task_events(deploy, "tool.outcome_unknown")
    # Recorded by the takeover: after the second attempt started, in another horse.
    attempts = before.attempts[sub.id]
    assert [a.status for a in attempts] == ["interrupted", "finished"], attempts
    second = [e for e in before.session_events(SESSION) if e.type == "attempt.started"][1]
    assert parse_worker_pid(second.data["worker"]) != horse
    assert second.seq < unknown.seq
    assert before.effects_of("deploy") == []  # nothing deployed yet: the horse is paused
    assert before.task("check_deploy", REQUEST).result == "0 deploy(s) on record"

    # Resume the zombie. Its lease guard ends it, or it finishes its deploy (the outside world
    # changes) and then finds its lease taken over: either way it must not write a record.
    os.kill(horse, signal.SIGCONT)
    wait_until(lambda: not pid_alive(horse), 20, "the resumed horse to finish its job")
    log = paused.log()
    assert any(
        mark in log
        for mark in ("was taken over", "lost; stopping this worker's run", "(status 75)")
    ), log
    assert paused.alive() and taker.alive()
    assert h.stop_workers() == [0, 0], h.diagnostics()

    after = h.world()
    assert after.events == before.events, "the fenced-out horse wrote events"
    assert after.tasks == before.tasks and after.submissions == before.submissions
    assert after.sessions[SESSION].lease.token == before.sessions[SESSION].lease.token
    # The effect log shows what really ran: at most the zombie's one deploy, never repeated.
    assert after.effects_of("deploy") in ([], [deploy.execution_id])
    assert [(t, p) for t, _e, _r, p in after.calls if t == "deploy"] == [("deploy", horse)]
    assert_invariants(after, [REQUEST])
    assert_model_requests(after)
