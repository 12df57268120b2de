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

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing.faults import Answer, FaultProxy
from fxdurable.testing.invariants import check_store

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
        journal = Journal(store, SystemClock(), RandomIds())
        sub = journal.admit("s1", agent="a", prompt="go").submission
        fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=60)
        assert fence is not None
        before = store.read(lambda v: v.get_session("s1"))
        assert before is not None
        proxy.lose_answer(COMMIT, mode)
        start = journal.begin_attempt(fence, sub.id, worker="w")  # its answer is lost
        assert proxy.lost == 1, "the proxy never faulted the commit: the test proves nothing"
        if mode == "late":
            assert proxy.landed_late.wait(10), "the held commit never reached the server"
        after = store.read(lambda v: v.get_session("s1"))
        assert after is not None
        attempts = store.read(lambda v: list(v.attempts(sub.id)))
        assert [a.number for a in attempts] == [start.attempt.number] == [1]
        # The transition's events once each: the session moved by one commit, not two.
        events = store.read(lambda v: list(v.events("s1")))
        assert [e.seq for e in events] == list(range(1, after.next_event_seq))
        assert after.version == before.version + 1, (before.version, after.version)
        # And the session goes on from there.
        journal.settle(fence, sub.id, "completed", text="done")
        journal.release(fence)
        summary = store.read(lambda v: check_store(v, now=time.time(), at_rest=True))
        assert summary.violations == ()
    finally:
        store.close()
