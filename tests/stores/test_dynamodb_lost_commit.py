"""A commit whose answer is lost, on DynamoDB: it lands once and the call succeeds.

A fault-injecting TCP proxy (:class:`fxdurable.testing.faults.FaultProxy`, the one the Redis
test and the soak use) stands between the store and the moto server. Armed, it lets the next
``TransactWriteItems`` through to moto (which applies it) and then drops the client's
connection without an answer (``drop``), or holds the answer until the client gives up
(``stall``). botocore sends the commit again with the same ``ClientRequestToken``; DynamoDB
would answer the resend with the first one's success, moto (which ignores the token) cancels
it because the first one moved the head. The store reads the heads back, finds the commit's
token there and takes the commit as done: one event, one attempt, the session consistent —
where a rerun from fresh reads would have applied the transition a second time. Held
instead (``late``), the first send reaches moto only after its resend was answered: the resend
applied it, the first is cancelled (the head moved), and the transition is still there once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from aws_support import REGION, aws_session
from lost_commit_support import assert_at_rest, assert_landed_once, claimed_session

from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing.faults import Answer, FaultProxy

pytestmark = pytest.mark.aws

COMMIT = b"DynamoDB_20120810.TransactWriteItems"  # its X-Amz-Target header


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    where = urlsplit(moto_server)
    with FaultProxy(where.hostname or "127.0.0.1", where.port or 80) as proxy:
        yield proxy


@pytest.mark.parametrize(
    "mode",
    [
        "drop",
        pytest.param("stall", marks=pytest.mark.slow),  # stall and late: a 10 s timeout
        pytest.param("late", marks=pytest.mark.slow),  # the first send lands after its resend
    ],
)
def test_a_commit_whose_answer_is_lost_lands_once(proxy: FaultProxy, mode: Answer) -> None:
    url = f"dynamodb://fxd-lost-{time.monotonic_ns() % 10**9}?region={REGION}"
    endpoint = f"http://127.0.0.1:{proxy.port}"
    store = DynamoStore(f"{url}&endpoint_url={endpoint}", session=aws_session())
    try:
        journal, fence, sub_id, before = claimed_session(store)
        proxy.lose_answer(COMMIT, mode)
        start = journal.begin_attempt(fence, sub_id, worker="w")  # its answer is lost
        assert proxy.lost == 1, "the proxy never faulted the commit: the test proves nothing"
        if mode == "late":
            assert proxy.landed_late.wait(10), "the held commit never reached the server"
        assert start.attempt.number == 1
        # The transition's events once each: the session moved by one commit, not two.
        assert_landed_once(store, sub_id, before, commits=1)
        # And the session goes on from there.
        journal.settle(fence, sub_id, "completed", text="done")
        journal.release(fence)
        assert_at_rest(store)
    finally:
        store.close()
