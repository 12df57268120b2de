"""Permission prompts on SQS (DESIGN §3.11, §5): ``fxdurable worker --queue sqs://`` processes.

An SQS worker runs its wakes in its own process, so ``hook.before-tool:deploy`` kills the whole
worker with the story's wake undeleted. A survivor, its reconciliation scan off, gets that
message again once its visibility timeout lapses, recovers the turn, and asks: the question
is committed, the message deleted, the lease let go, and nothing runs the turn. The answer
(from a process on the same queue) sends the wake that finishes it: the deploy exactly once,
never ``outcome_unknown``, the question asked once; invariants; a next message completes.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from crash_cases import REQUEST, SESSION, STORY
from redelivery_crash import RedeliveringHarness, follow_up
from sqs_support import SqsHarness
from test_rq_questions import (
    ASK,
    answer_allow,
    assert_deployed_once_after_one_question,
    wait_for_the_question,
)
from test_sqs_crash_suite import LEASE_TTL_S

pytestmark = [pytest.mark.crash]


def test_a_worker_killed_before_the_deploys_hook_asks_once_after_redelivery(
    make_sqs_harness: Callable[..., SqsHarness],
) -> None:
    killed_before_the_deploys_hook_asks(make_sqs_harness(lease_ttl_s=LEASE_TTL_S))


def killed_before_the_deploys_hook_asks(h: RedeliveringHarness) -> None:
    """One question after the redelivery, the deploy once after the answer (also the Postgres
    pair's: test_postgres_agent_crash.py)."""
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    point = "hook.before-tool:deploy"
    doomed = h.start_worker(env={**ASK, "FXD_CRASH_AT": point}, scan_interval_s=0)
    assert doomed.proc.wait(timeout=40) == -signal.SIGKILL, doomed.log()
    assert f"crash injected at {point}" in doomed.log(), doomed.log()
    h.start_worker(env=ASK, scan_interval_s=0)
    wait_for_the_question(h, sub_id)
    assert h.world().effects_of("deploy") == []
    answer_allow(h)
    h.wait_settled([sub_id], timeout=30)
    # The survivor stays up for the follow-up: wait for its release, not only the settle.
    h.wait_at_rest(SESSION)
    assert_deployed_once_after_one_question(h, interruptions=1)
    follow_up(h)
