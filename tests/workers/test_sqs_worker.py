"""``fxdurable worker --queue sqs://`` end to end: real worker processes on a moto SQS queue.

A turn with several tools and a next message; duplicate deliveries of every wake and two
worker processes on one session (no duplicate effect, the journal never forks); a FIFO queue;
SIGTERM at a step boundary; a message that is not a wake on its way to the dead-letter queue,
and a wake that kills every worker taking it, whose submission settles ``failed`` once its
attempts are spent while the session comes to rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqs_support import SqsHarness

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
