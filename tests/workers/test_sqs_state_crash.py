"""Persisted state (``ctx.state``) as the guard of a one-shot side effect on SQS + DynamoDB:
a real ``fxdurable worker --queue sqs://`` SIGKILLed at ``tool.after-execute:send_welcome`` (the
welcome sent, its result and state write not committed), recovered by the redelivered wake.
The embedded and RQ twins (``tests/crash/test_crash_state.py``, ``test_rq_state_crash.py``)
cover the other points; this one proves the state's commit on DynamoDB's transactions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crash_cases import NEXT_REQUEST, REQUEST, SESSION
from redelivery_crash import RedeliveringHarness, crash_and_recover
from sqs_support import SqsHarness
from test_sqs_crash_suite import LEASE_TTL_S

from tests.kit.story import welcomed_text
from tests.kit.world import assert_invariants

pytestmark = [pytest.mark.crash]

WELCOME = "welcome crash"


def test_a_welcome_killed_before_its_commit_is_sent_once(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    welcome_killed_before_its_commit(make_sqs_harness(lease_ttl_s=LEASE_TTL_S))


def welcome_killed_before_its_commit(h: RedeliveringHarness) -> None:
    """The welcome sent once across the crash, its state committed with the recovered call,
    and a next welcome finding it (also the Postgres pair's: test_postgres_agent_crash.py)."""
    world, _ = crash_and_recover(h, ["tool.after-execute:send_welcome"], prompt=WELCOME)
    task = world.task("send_welcome", REQUEST)
    assert (task.status, task.runs) == ("completed", 2)
    assert world.effects_of("send_welcome") == [task.execution_id]
    (change,) = world.events_of("state.changed")
    assert change.seq > world.task_events(task, "tool.started")[-1].seq

    sub_id = h.submit_one(SESSION, WELCOME, NEXT_REQUEST)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.result_text == welcomed_text("crash was already welcomed"), sub
    assert h.stop_workers() == [0], h.diagnostics()
    world = h.world()
    assert_invariants(world, [REQUEST, NEXT_REQUEST])
    assert len(world.effects_of("send_welcome")) == 1
    session = h.read(lambda v: v.get_session(SESSION))
    assert session is not None and dict(session.state) == {"welcomed": "crash"}
