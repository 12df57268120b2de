"""Question timeouts on real worker processes (issue 28 §1): RQ + Redis (the timer fired by
the RQ parent's scan: RQ without its scheduler delays no wake) and SQS + DynamoDB (the timer's
wake held back by ``DelaySeconds``, the scan off). The story agent asks before ``deploy`` with
``FXD_TEST_ASK_TIMEOUT_S``; nobody answers: the question expires once, denied, the deploy never
runs, and the story still completes; the invariants hold. The real clock runs here: these are
the only tests of a worker process's own timer path (the runtime tests drive a fake one)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crash_cases import REQUEST, SESSION, STORY
from rq_support import RqHarness
from sqs_support import SqsHarness
from worker_support import WorkerHarness

from tests.kit.world import assert_invariants

TIMEOUT = {"FXD_TEST_ASK_BEFORE": "deploy", "FXD_TEST_ASK_TIMEOUT_S": "1"}


def assert_expired_once(h: WorkerHarness) -> None:
    world = h.world()
    assert_invariants(world, [REQUEST])
    deploy = world.task("deploy", REQUEST)
    assert deploy.runs == 0 and deploy.answer is not None
    assert (deploy.answer.kind, deploy.answer.timed_out) == ("deny", True)
    assert deploy.result == "denied: no answer within 1s"
    assert world.effects_of("deploy") == []
    assert len(world.events_of("input.requested")) == 1
    assert [e.data["answer"] for e in world.events_of("input.answered")] == ["deny"]


@pytest.mark.redis
def test_an_rq_worker_expires_an_unanswered_question(
    make_harness: Callable[..., RqHarness],
) -> None:
    h = make_harness()
    h.start_worker(env=TIMEOUT)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_settled([sub_id], timeout=30)
    assert h.stop_workers() == [0], h.diagnostics()
    assert_expired_once(h)


@pytest.mark.aws
def test_an_sqs_worker_expires_an_unanswered_question_by_a_delayed_wake(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    h = make_sqs_harness()
    h.start_worker(env=TIMEOUT, scan_interval_s=0)  # no scan: only the delayed wake
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_settled([sub_id], timeout=30)
    assert_expired_once(h)
