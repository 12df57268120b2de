"""The crash suite's steps for the queues that redeliver a killed worker's wake (SQS, the
Postgres queue): a worker dies at each crash point in turn, a survivor with the scan off
recovers the session from the wake delivered again, and the session answers a next message.
Shared by ``test_sqs_crash_suite.py`` and ``test_postgres_crash_suite.py``; the cases and
their checks are ``crash_cases``'.
"""

from __future__ import annotations

import re
import signal
import time

from crash_cases import NEXT_REQUEST, REQUEST, SESSION, STORY, check_follow_up
from postgres_queue_support import PgHarness
from sqs_support import SqsHarness
from worker_support import WorkerProc, pid_alive, print_measure, wait_until

from tests.kit.delegation import child_requests
from tests.kit.world import World, assert_invariants

__all__ = ["RedeliveringHarness", "crash_and_recover", "delivered_again", "follow_up"]

# SqsHarness or PgHarness: a harness whose queue redelivers and can say how many wakes it holds.
RedeliveringHarness = SqsHarness | PgHarness


def delivered_again(worker: WorkerProc, delivery: int, reason: str = "submitted") -> bool:
    """The survivor handled (and deleted) the original wake (sent for ``reason``) on its
    ``delivery``-th receipt."""
    pattern = rf"wake {SESSION} \({reason}\) done in [\d.]+s, delivery {delivery}\n"
    return re.search(pattern, worker.log()) is not None


def crash_and_recover(
    h: RedeliveringHarness,
    plan: list[str],
    *,
    prompt: str = STORY,
    env: dict[str, str | None] | None = None,
    timeout: float = 40.0,
) -> tuple[World, WorkerProc]:
    """A worker dies at each point of ``plan`` in turn; then a survivor (scan off) recovers the
    session from the redelivered wake. Returns the world at rest and the survivor."""
    env = env or {}
    sub_id = h.submit_one(SESSION, prompt, REQUEST)
    killed_at = 0.0
    for point in plan:
        doomed = h.start_worker(env={**env, "FXD_CRASH_AT": point}, scan_interval_s=0)
        assert doomed.proc.wait(timeout=timeout) == -signal.SIGKILL, doomed.log()
        killed_at = time.time()
        assert f"crash injected at {point}" in doomed.log(), doomed.log()
    survivor = h.start_worker(env=env, scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=timeout)
    recovery = (sub.settled_at or 0.0) - killed_at
    kind = h.ready_mark.removeprefix("listening on ").removesuffix(" queue")
    print_measure(f"{kind} recovery after SIGKILL at {plan[-1]} (redelivery)", recovery)
    assert recovery < h.lease_ttl_s, f"recovery took {recovery:.2f}s: it waited for the lease"
    # The wake the killed workers received was delivered once more, handled and deleted.
    wait_until(lambda: delivered_again(survivor, len(plan) + 1), timeout, "the redelivery")
    world = h.world()
    assert_invariants(world, [REQUEST, *child_requests(world)])  # its subagents' too
    pids = world.attempt_pids(REQUEST)
    # The last attempt is the survivor's, and every other process that ran one is gone. The
    # survivor may have run more than one: a slow machine takes it past its own deadline too,
    # and it continues the turn itself (seen in a loaded CI run: [killed, survivor, survivor]).
    others = [p for p in pids if p != survivor.pid]
    assert pids[-1] == survivor.pid and not [p for p in others if pid_alive(p)], pids
    return world, survivor


def follow_up(h: RedeliveringHarness) -> World:
    """The session accepts a next message, run by the survivor, and completes it; every
    wake was deleted."""
    sub_id = h.submit_one(SESSION, "status?", NEXT_REQUEST)
    h.wait_settled([sub_id], timeout=30)
    assert h.stop_workers() == [0], h.diagnostics()
    world = h.world()
    check_follow_up(world)
    assert h.depth() == 0
    return world
