"""Parallel tool batches and subagents on SQS + DynamoDB: a real ``fxdurable worker --queue
sqs://`` SIGKILLed while calls of one batch run, recovered by the redelivered wake.

The RQ twins (``test_rq_crash_suite.py``, ``test_rq_subagents.py``) and the embedded ones
(``tests/crash/test_crash_parallel_batch.py``, ``test_crash_subagents.py``) define the
scenarios and their checks, reused here; on SQS the whole worker dies (``FXD_CRASH_AT``) and
only its message, delivered again after the visibility timeout (the scan is off), recovers the
session (``test_sqs_crash_suite.crash_and_recover``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crash_cases import REQUEST
from redelivery_crash import RedeliveringHarness, crash_and_recover, follow_up
from sqs_support import SqsHarness
from test_rq_subagents import TOGETHER
from test_sqs_crash_suite import LEASE_TTL_S

from tests.kit.delegation import assert_children_resumed, child_requests
from tests.kit.world import assert_batch_recovered

pytestmark = [pytest.mark.crash]


# The two batch points, also the Postgres pair's (test_postgres_agent_crash.py).
BATCH_POINTS = pytest.mark.parametrize(
    ("point", "read_recorded"),
    [("tool.after-record:read_state", True), ("tool.batch.running", False)],
)


@BATCH_POINTS
def test_a_worker_killed_with_calls_of_a_batch_running(
    make_sqs_harness: Callable[..., SqsHarness], point: str, read_recorded: bool
) -> None:
    batch_killed(make_sqs_harness(lease_ttl_s=LEASE_TTL_S), point, read_recorded)


def batch_killed(h: RedeliveringHarness, point: str, read_recorded: bool) -> None:
    """``batch crash`` (survey, read_state, reserve in one parallel batch), killed with
    read_state's result recorded or with all three running: the recorded result stands, the
    running calls re-run by their policies, the answer quotes them in asked order."""
    world, _ = crash_and_recover(h, [point], prompt="batch crash")
    assert_batch_recovered(world, REQUEST, read_recorded=read_recorded)
    follow_up(h)


def test_a_worker_killed_with_two_children_running_is_recovered_by_redelivery(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    children_killed(make_sqs_harness(lease_ttl_s=LEASE_TTL_S))


def children_killed(h: RedeliveringHarness) -> None:
    """``delegate2 crash``: two research children of one batch meet at the barrier, the worker
    dies inside the child running fetch (its result recorded). The redelivered wake re-executes
    both calls: one child session and one submission per call, the recorded step not re-run."""
    world, _ = crash_and_recover(
        h, ["subagent.in-child:fetch"], prompt="delegate2 crash", env=dict(TOGETHER)
    )
    assert len(child_requests(world)) == 2 and world.summary.sessions == 3
    assert_children_resumed(world, "ab", killed_in="fetch", together=True)
    # The invariants cover the children's submissions too (crash_and_recover, follow_up).
    assert follow_up(h).summary.sessions == 3
