"""``fxdurable worker --queue sqs://`` end to end: real worker processes on a moto SQS queue.

A turn with several tools and a next message; duplicate deliveries of every wake and two
worker processes on one session (no duplicate effect, the journal never forks); a FIFO queue;
SIGTERM at a step boundary; a message that is not a wake on its way to the dead-letter queue,
and a wake that kills every worker taking it, whose submission settles ``failed`` once its
attempts are spent while the session comes to rest.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
from sqs_support import SqsHarness
from worker_support import REPO, wait_until

from tests.kit.story import done_text
from tests.kit.world import assert_invariants, assert_model_requests

STORY = "story sqs"


def test_a_turn_with_tools_and_a_next_message(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    h = make_sqs_harness()
    worker = h.start_worker()
    sub_id = h.submit_one("s", STORY, "r1")
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed" and sub.result_text == done_text("sqs"), sub
    next_id = h.submit_one("s", "status?", "r2")
    (sub,) = h.wait_settled([next_id], timeout=30)
    assert sub.status == "completed" and (sub.result_text or "").startswith("Status: "), sub
    assert h.stop_workers() == [0], h.diagnostics()

    world = h.world()
    assert_invariants(world, ["r1", "r2"], sessions=1)
    assert_model_requests(world)
    for tool in ("read_state", "charge", "deploy"):
        assert world.task(tool, "r1").status == "completed"
    # Each wake was received once and deleted once it was handled: nothing is left queued.
    log = worker.log()
    assert len(re.findall(r"wake s \(submitted\) done in [\d.]+s, delivery 1\n", log)) == 2, log
    assert h.depth() == 0
    if h.store_url.startswith("dynamodb://"):
        from dynamo_support import offloaded_keys

        # The test's table offloads every record past 256 bytes to its bucket (conftest.py):
        # the invariants above were read back through S3.
        assert offloaded_keys(h.store_url), "nothing went to the bucket"


def test_every_wake_twice_and_two_workers_on_one_session(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """Every wake is sent three times (SQS may deliver any of them twice as well) to two
    worker processes that each run two wakes at once: whoever claims the lease runs the turn,
    every other delivery finds it held or at rest and is deleted. No effect happens twice, no
    model request is made twice (the journal never forked), and the queue ends empty."""
    h = make_sqs_harness()
    workers = h.start_workers(2, args=["--concurrency", "2"], env={"FXD_TEST_TOOL_S": "0.2"})
    ids = h.submit([("s", STORY, "r1"), ("s", "status?", "r2")], extra_wakes=[2, 2])
    subs = h.wait_settled(ids, timeout=40)
    assert [s.status for s in subs] == ["completed", "completed"], subs
    # Every message sent (2 admissions x 3) was received and deleted by one of the workers.
    wait_until(lambda: h.depth() == 0, 20, "the queue to empty")
    assert h.stop_workers() == [0, 0], h.diagnostics()
    handled = sum(len(re.findall(r"wake s \((submitted|dup)\) done", w.log())) for w in workers)
    assert handled >= 6, h.diagnostics()

    world = h.world()
    assert_invariants(world, ["r1", "r2"], sessions=1)
    assert_model_requests(world)
    assert len(world.calls_of("deploy")) == 1 and len(world.effects_of("deploy")) == 1
    assert world.ledger == [world.task("charge", "r1").execution_id]


def test_a_fifo_queue_keeps_each_session_in_order(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """A ``.fifo`` queue groups wakes by session: two workers, two sessions with two messages
    each (and a duplicate wake each, which SQS's deduplication may drop); each session's
    submissions run one after the other in admission order, and nothing runs twice."""
    h = make_sqs_harness(fifo=True)
    h.start_workers(2)
    items = [("a", "story a", "a1"), ("b", "story b", "b1"), ("a", "status?", "a2")]
    items.append(("b", "ticks 1 b", "b2"))  # model requests are told apart by their prompt
    ids = h.submit(items, extra_wakes=[1, 1, 1, 1])
    subs = h.wait_settled(ids, timeout=40)
    assert [s.status for s in subs] == ["completed"] * 4, subs
    wait_until(lambda: h.depth() == 0, 20, "the queue to empty")
    assert h.stop_workers() == [0, 0], h.diagnostics()
    world = h.world()
    assert_invariants(world, ["a1", "b1", "a2", "b2"], sessions=2)
    assert_model_requests(world)
    for session, first, second in (("a", "a1", "a2"), ("b", "b1", "b2")):
        one, two = world.submission(first), world.submission(second)
        assert one.session_id == two.session_id == session
        assert one.settled_at is not None and two.started_at is not None
        assert one.settled_at <= two.started_at


def test_sigterm_stops_at_a_step_boundary_and_hands_the_turn_on(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """SIGTERM while a tick runs: the tick finishes, the attempt yields, a continuation wake is
    enqueued, the message that started the turn is deleted and the worker exits 0. A next
    worker finishes the turn from the continuation; no tick runs twice."""
    h = make_sqs_harness(lease_ttl_s=30.0)
    env: dict[str, str | None] = {"FXD_TEST_TICK_S": "1"}
    first = h.start_worker(env=env, scan_interval_s=0)
    sub_id = h.submit_one("s", "ticks 3 term", "r1")
    h.wait_event("s", lambda e: e.type == "tool.started" and e.data.get("tool") == "tick")
    assert first.stop(signal.SIGTERM, timeout=30) == 0, first.log()
    assert re.search(r"wake s \(submitted\) done in [\d.]+s, delivery 1\n", first.log())
    # What is left is continuation wakes (one before the lease was let go, one after it:
    # runtime/worker.py); the wake that started the turn was deleted.
    assert {json.loads(b)["reason"] for b in h.bodies()} == {"continuation (SIGTERM)"}
    second = h.start_worker(env=env, scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed" and sub.result_text == "Ticked 3 times: term", sub
    # Logged once its message is deleted, just after the turn settled.
    wait_until(lambda: "wake s (continuation (SIGTERM)) done" in second.log(), 30, "the log")
    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["r1"])
    assert_model_requests(world)
    assert [a.status for a in world.attempts[sub.id]] == ["yielded", "finished"]
    assert [e.data.get("reason") for e in world.events_of("attempt.yielded")] == ["SIGTERM"]
    assert len(world.calls_of("tick")) == 3 and sub.interruptions == 0


def test_a_message_that_is_not_a_wake_goes_to_the_dead_letter_queue(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """A body that is not a wake is logged on each delivery and never deleted, so SQS moves it
    to the dead-letter queue after ``maxReceiveCount`` (2); the worker runs on and serves the
    next wake. On a queue without a dead-letter queue it is deleted once logged."""
    h = make_sqs_harness(max_receives=2, visibility_s=1)
    h.send_raw("not a wake")
    worker = h.start_worker()
    wait_until(lambda: h.bodies(h.dlq_url) == ["not a wake"], 30, "the dead-letter queue")
    log = worker.log()
    assert "is not a wake (a message that is not a wake (not JSON)" in log, log
    assert "left for the dead-letter queue (delivery 1 of 2)" in log, log
    assert "left for the dead-letter queue (delivery 2 of 2)" in log, log
    sub_id = h.submit_one("s", "status?", "r1")
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed", sub
    # The turn settles before its message is deleted: wait for the line logged after the delete.
    wait_until(lambda: re.search(r"wake s \(.*\) done", worker.log()), 30, "the wake's delete")
    assert h.depth() == 0 and worker.alive()

    plain = make_sqs_harness()
    plain.send_raw('{"v": 1, "reason": "no session"}')
    other = plain.start_worker(args=["--burst"], ready=False)
    assert other.proc.wait(timeout=30) == 0, other.log()
    assert "is not a wake (a wake without a session id" in other.log(), other.log()
    assert "deleted (the queue has no dead-letter queue)" in other.log()
    assert plain.depth() == 0
    assert h.stop_workers() == [0]


def test_a_wake_that_kills_every_worker_settles_failed_and_the_session_rests(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """A poison wake: every worker that takes it dies (SIGKILL before each model request). SQS
    delivers it twice (``maxReceiveCount`` 2), then moves it to the dead-letter queue; the next
    worker's reconciliation scan wakes the session once more, and the submission, two attempts
    spent (``max_attempts`` 2), settles ``failed`` with a readable error instead of looping.
    The session rests and answers its next message."""
    h = make_sqs_harness(max_receives=2, visibility_s=1, lease_ttl_s=30.0)
    budget = {"FXD_TEST_MAX_ATTEMPTS": "2"}
    sub_id = h.submit_one("s", STORY, "r1")
    for _ in range(2):
        doomed = h.start_worker(
            env={**budget, "FXD_CRASH_AT": "model.before-request"}, scan_interval_s=0
        )
        assert doomed.proc.wait(timeout=30) == -signal.SIGKILL, doomed.log()
    worker = h.start_worker(env=budget)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "failed", sub
    assert sub.error is not None and "interrupted 2 times; the budget is 2 attempts" in str(
        sub.error
    ), sub.error
    wait_until(lambda: len(h.bodies(h.dlq_url)) == 1, 30, "the wake in the dead-letter queue")
    assert [json.loads(b)["session"] for b in h.bodies(h.dlq_url)] == ["s"]
    wait_until(lambda: "wake s (reconcile) done" in worker.log(), 30, "the scan's wake")

    next_id = h.submit_one("s", "status?", "r2")
    (nxt,) = h.wait_settled([next_id], timeout=30)
    assert nxt.status == "completed", nxt
    assert h.stop_workers() == [0]
    world = h.world()
    assert_invariants(world, ["r1", "r2"])
    assert world.submission("r1").interruptions == 2
    assert not world.calls_of("deploy") and not world.model_calls[sub.id]


def test_burst_through_the_deployable_entry_point(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    """``python workers/sqs_worker.py --burst`` runs what is queued and exits 0."""
    h = make_sqs_harness()
    sub_id = h.submit_one("s", STORY, "r1")
    done = subprocess.run(
        [sys.executable, str(REPO / "workers" / "sqs_worker.py"), "--burst"],
        cwd=h.root,
        env=h.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (sub,) = h.read(lambda v: [v.get_submission(sub_id)])
    assert sub.status == "completed" and sub.result_text == done_text("sqs"), sub
    assert h.depth() == 0


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        pytest.param([], {"FXD_QUEUE": "missing"}, "does not exist; create it", id="no-queue"),
        pytest.param(["--no-fork"], {}, "--no-fork apply to RQ workers only", id="no-fork"),
        pytest.param(
            ["--connect-timeout", "3"], {}, "--connect-timeout apply to RQ", id="connect-timeout"
        ),
        pytest.param(["--concurrency", "11"], {}, "--concurrency must be 1 to 10", id="many"),
        pytest.param([], {"FXD_SQS_VISIBILITY_S": "soon"}, "VISIBILITY_S must be", id="vis"),
    ],
)
def test_a_worker_that_cannot_run_says_why_before_taking_any_message(
    make_sqs_harness: Callable[..., SqsHarness], args: list[str], env: dict[str, str], says: str
) -> None:
    h = make_sqs_harness()
    h.send_raw("left alone")
    if env.get("FXD_QUEUE") == "missing":
        env = {"FXD_QUEUE": h.queue_url.replace(h.queue_name, f"{h.queue_name}-gone")}
    code, out, err = h.run_cli("worker", "--burst", *args, env=env)
    assert (code, out) == (2, ""), (code, out, err)
    assert says in err, err
    assert "Traceback" not in err and "testing" not in err  # no stack, no credential
    assert h.bodies() == ["left alone"]  # nothing was received before the check
