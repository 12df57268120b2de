"""The crash suite on SQS (DESIGN §5, issue 11): SIGKILL of real ``fxdurable worker --queue
sqs://`` processes, recovered by SQS redelivery.

An SQS worker runs its wakes in its own process, so a crash point (``FXD_CRASH_AT``) kills the
whole worker: its message is neither deleted nor extended any more. Each case starts one
worker per planned crash, in turn, each dying at its point; then a survivor, with the
reconciliation scan off (``--scan-interval 0``), so that only the killed worker's message,
delivered again once its visibility timeout (2 s) lapses, can recover the session. The survivor
takes the lease over at once (the holder's pid is gone on this host), the turn runs to rest, the
invariants are checked from the store and the effect logs, and the session answers a next
message. The recovery time (from the last SIGKILL to the turn settling) is printed.

The same checks as the RQ suite (``crash_cases``). ``submission.after-admit`` kills the
submitter: no wake was ever sent, and the worker's reconciliation scan finds the work.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

import pytest
from crash_cases import (
    CASES,
    REQUEST,
    SESSION,
    STORY,
    assert_story_completed,
    assert_unknown_deploy,
    check_continuation,
)
from redelivery_crash import crash_and_recover, delivered_again, follow_up
from sqs_support import SqsHarness
from worker_support import freeze_outside_a_commit, print_measure, wait_until

from tests.kit.merged_commits import MERGED_CASES, SEQUENCE, SEQUENTIAL_ENV
from tests.kit.world import World, assert_invariants, assert_model_requests

pytestmark = [pytest.mark.crash]

# Far longer than a recovery takes (a visibility timeout and the rest of the turn), so a
# recovery that settles within it took the same-host shortcut and did not wait for the lease.
LEASE_TTL_S = 30.0


@pytest.mark.parametrize(("plan", "check"), [pytest.param(*c, id=c[0][-1]) for c in CASES])
def test_crash_point(
    make_sqs_harness: Callable[..., SqsHarness],
    plan: list[str],
    check: Callable[[World], None],
) -> None:
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S)
    world, _ = crash_and_recover(h, plan)
    check(world)
    follow_up(h)


@pytest.mark.parametrize(("spec", "check"), [pytest.param(*c, id=c[0]) for c in MERGED_CASES])
def test_a_merged_commit_killed(
    make_sqs_harness: Callable[..., SqsHarness], spec: str, check: Callable[[World], None]
) -> None:
    """Issue 23 §2: a result and the next call's intent are one commit; each kill finds the
    next call running and recovery settles it by its policy (tests.kit.merged_commits)."""
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S)
    world, _ = crash_and_recover(h, [spec], prompt=SEQUENCE, env=SEQUENTIAL_ENV)
    check(world)
    follow_up(h)


@pytest.mark.parametrize("point", ["continuation.before-enqueue", "continuation.after-enqueue"])
def test_crash_in_a_continuation(make_sqs_harness: Callable[..., SqsHarness], point: str) -> None:
    """Job timeout 4 s per message: ticks of 1.5 s reach its deadline (3.2 s, a fifth kept as
    margin), the attempt yields, and the worker dies around the continuation's enqueue. Before
    it: only the redelivered message is left to continue the turn; after it, the continuation
    runs it and the redelivered original finds the session at rest."""
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S, job_timeout_s=4)
    world, _ = crash_and_recover(
        h, [point], prompt="ticks 3 cont", env={"FXD_TEST_TICK_S": "1.5"}, timeout=40
    )
    check_continuation(world)
    follow_up(h)


def test_a_worker_killed_mid_tool_is_recovered_by_redelivery(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """SIGKILL from outside (a power cut) while the unsafe deploy runs: a fresh worker gets the
    message again after its visibility timeout and records the deploy ``outcome_unknown``."""
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S)
    env: dict[str, str | None] = {"FXD_TEST_DEPLOY_S": "5"}
    first = h.start_worker(env=env, scan_interval_s=0)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_tool_running(SESSION, "deploy")
    first.kill()
    killed_at = time.time()
    survivor = h.start_worker(scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    print_measure("SQS recovery after SIGKILL mid-tool", (sub.settled_at or 0.0) - killed_at)
    wait_until(lambda: delivered_again(survivor, 2), 30, "the redelivery")
    world = h.world()
    assert_invariants(world, [REQUEST])
    # Killed inside the deploy, before its effect: it ran once and took no effect.
    assert_unknown_deploy(world, deploys=0, calls=1)
    assert world.attempt_pids(REQUEST) == [first.pid, survivor.pid]
    follow_up(h)


def test_crash_after_admission_is_found_by_the_scan(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """The submitter dies between the admission's commit and the enqueue: no message exists.
    The worker's reconciliation scan finds the admitted work and wakes it through SQS; the
    client's retry (same request id) gets the same submission back."""
    h = make_sqs_harness()
    code, out, err = h.run_submitter(SESSION, STORY, REQUEST, crash_at="submission.after-admit")
    assert code == -signal.SIGKILL and "crash injected at submission.after-admit" in err, (
        code,
        out,
        err,
    )
    (sub_id,) = h.read(lambda v: [s.id for s in v.submissions(SESSION)])
    assert h.depth() == 0
    worker = h.start_worker()
    h.wait_settled([sub_id], timeout=30)
    wait_until(lambda: "wake s (reconcile) done" in worker.log(), 30, "the scan's wake")

    code, out, err = h.run_submitter(SESSION, STORY, REQUEST)
    assert code == 0, (code, out, err)
    assert json.loads(out) == {"submission": sub_id, "status": "completed"}, out
    world = h.world()
    assert_invariants(world, [REQUEST])
    assert_story_completed(world, interruptions=0)
    assert_model_requests(world)
    follow_up(h)


def test_a_hung_worker_is_taken_over_once_its_lease_expires(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """A worker frozen mid-deploy (SIGSTOP: how a partitioned host or a stalled VM looks) is
    alive, so its pid proves nothing: its message comes back once it stops being extended,
    the other worker finds the lease still held and drops that delivery, and the session is
    recovered by the reconciliation scan once the lease (6 s: well past the redelivery after the
    2 s visibility timeout, even with a slow worker start) expires. The frozen worker is then
    killed before it can resume (fencing, should it resume, is the RQ fencing tests')."""
    h = make_sqs_harness(lease_ttl_s=6.0)
    frozen = h.start_worker(env={"FXD_TEST_DEPLOY_S": "5"}, scan_interval_s=0)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_tool_running(SESSION, "deploy")
    freeze_outside_a_commit(frozen.pid, h.store_url)  # SQLite under FXD_TEST_SQS_STORES
    stopped_at = time.time()
    try:
        survivor = h.start_worker()
        (sub,) = h.wait_settled([sub_id], timeout=30)
    finally:
        frozen.kill()
    recovery = (sub.settled_at or 0.0) - stopped_at
    print_measure("SQS recovery from a hung worker (lease expiry + scan)", recovery)
    assert recovery >= h.lease_ttl_s - h.heartbeat_s, "taken over while the lease still held"
    # Its message was delivered again and dropped (the lease was held); the scan recovered it.
    wait_until(lambda: delivered_again(survivor, 2), 30, "the redelivery")
    wait_until(lambda: "wake s (reconcile) done" in survivor.log(), 30, "the scan's wake")
    world = h.world()
    assert_invariants(world, [REQUEST])
    assert_unknown_deploy(world, deploys=0, calls=1)
    assert world.attempt_pids(REQUEST) == [frozen.pid, survivor.pid]
    follow_up(h)
