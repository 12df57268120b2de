"""Settlement webhooks on real worker processes (issue 28 §6, docs/webhooks.md): the story's
end is POSTed to a real receiver, which refuses the first attempt (503). The retry is the
queue's to bring back: on RQ + Redis the RQ parent's scan (RQ without its scheduler delays no
wake), on SQS + DynamoDB a wake held back by ``DelaySeconds`` with the scan off. Both
attempts carry the submission id and a valid signature; the session comes to rest only once
nothing is owed, and the invariants hold. The real clock runs here: the runtime tests drive
the same path in one process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from crash_cases import REQUEST, SESSION, STORY
from rq_support import RqHarness
from sqs_support import SqsHarness
from webhook_support import SECRET, Receiver, receiving
from worker_support import WorkerHarness

import fxdurable as fx
from tests.kit.world import assert_invariants

BACKOFF_S = 1.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving((503, 204)) as got:
        yield got


def hooked(receiver: Receiver) -> dict[str, str]:
    return {"FXD_TEST_WEBHOOK_URL": receiver.url, "FXD_TEST_WEBHOOK_BACKOFF_S": str(BACKOFF_S)}


def assert_delivered_on_retry(h: WorkerHarness, receiver: Receiver, sub_id: str) -> None:
    receiver.wait_for(2, timeout=30)
    h.wait_at_rest(SESSION)  # the lease let go and no webhook owed
    assert len(receiver.received) == 2, receiver.received
    assert [h_["x-fxdurable-delivery"] for h_, _ in receiver.received] == [sub_id, sub_id]
    for headers, body in receiver.received:
        sent = fx.verify_webhook(body, headers["x-fxdurable-signature"], SECRET)
        assert (sent["submission"], sent["outcome"]) == (sub_id, "completed")
    world = h.world()
    assert_invariants(world, [REQUEST])
    (delivered,) = world.events_of("webhook.delivered")
    assert delivered.data == {"submission": sub_id, "attempts": 2, "status": 204}
    assert not world.events_of("webhook.abandoned")


@pytest.mark.redis
def test_an_rq_worker_retries_a_refused_webhook_from_its_scan(
    make_harness: Callable[..., RqHarness], receiver: Receiver
) -> None:
    h = make_harness()
    h.start_worker(env=hooked(receiver))
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_settled([sub_id], timeout=30)
    assert_delivered_on_retry(h, receiver, sub_id)
    assert h.stop_workers() == [0], h.diagnostics()


@pytest.mark.aws
def test_an_sqs_worker_retries_a_refused_webhook_by_a_delayed_wake(
    make_sqs_harness: Callable[..., SqsHarness], receiver: Receiver
) -> None:
    h = make_sqs_harness()
    h.start_worker(env=hooked(receiver), scan_interval_s=0)  # no scan: only the delayed wake
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_settled([sub_id], timeout=30)
    assert_delivered_on_retry(h, receiver, sub_id)
