"""Agent features through a crash on the Postgres pair (issue 27): the SQS twins' cases
(``test_sqs_state_crash.py``, ``test_sqs_questions.py``) with ``fxdurable worker --queue
postgresql://`` processes whose store is the same database, recovered by the Postgres queue's
redelivery: persisted state guarding a one-shot effect killed before its commit, a
permission prompt whose hook's worker was killed before it asked, calls of a parallel batch
running (``test_sqs_batches.py``) and two subagent children running.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from postgres_queue_support import PgHarness
from test_sqs_batches import BATCH_POINTS, batch_killed, children_killed
from test_sqs_questions import killed_before_the_deploys_hook_asks
from test_sqs_state_crash import welcome_killed_before_its_commit

pytestmark = [pytest.mark.crash]

LEASE_TTL_S = 30.0  # far past a recovery: a recovery within it did not wait for the lease


def test_a_welcome_killed_before_its_commit_is_sent_once(
    make_pg_harness: Callable[..., PgHarness], postgres_url: str
) -> None:
    welcome_killed_before_its_commit(
        make_pg_harness(store_url=postgres_url, lease_ttl_s=LEASE_TTL_S)
    )


def test_a_worker_killed_before_the_deploys_hook_asks_once_after_redelivery(
    make_pg_harness: Callable[..., PgHarness], postgres_url: str
) -> None:
    killed_before_the_deploys_hook_asks(
        make_pg_harness(store_url=postgres_url, lease_ttl_s=LEASE_TTL_S)
    )


@BATCH_POINTS
def test_a_worker_killed_with_calls_of_a_batch_running(
    make_pg_harness: Callable[..., PgHarness], postgres_url: str, point: str, read_recorded: bool
) -> None:
    batch_killed(
        make_pg_harness(store_url=postgres_url, lease_ttl_s=LEASE_TTL_S), point, read_recorded
    )


def test_a_worker_killed_with_two_children_running_is_recovered_by_redelivery(
    make_pg_harness: Callable[..., PgHarness], postgres_url: str
) -> None:
    children_killed(make_pg_harness(store_url=postgres_url, lease_ttl_s=LEASE_TTL_S))
