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

import pytest
from aws_support import REGION, aws_session
from dynamo_support import dynamo_url, request_counter
from fault_support import fault_proxy
from lost_commit_support import SESSION, assert_at_rest, assert_landed_once, claimed_session

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal
from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.core.states import ToolTaskStatus
from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing.faults import Answer, FaultProxy

pytestmark = pytest.mark.aws

COMMIT = b"DynamoDB_20120810.TransactWriteItems"  # its X-Amz-Target header


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultProxy]:
    with fault_proxy(moto_server, 80) as proxy:
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


def running_task(journal: Journal, fence: Fence, sub_id: str) -> str:
    """s1's attempt begun and a model call with one safe call recorded: the call's task id."""
    journal.begin_attempt(fence, sub_id, worker="w")
    call = ToolCallRequest(name="x", arguments="{}")
    (task,) = journal.record_model_call(
        fence, sub_id, round_=0, text="", tool_calls=(call,), policies=("safe",), usage=Usage()
    ).tasks
    return task.id


def test_what_a_lost_commit_wrote_is_read_back_not_served(proxy: FaultProxy) -> None:
    """The holder's start_tool lands but its answer is lost: the store decides it landed by
    its token, but holds nothing built from it. So the holder's next read (which would be
    free after an answered commit: that commit's state) reads the head, and the next
    transition commits once on what is stored."""
    url = f"dynamodb://fxd-lost-{time.monotonic_ns() % 10**9}?region={REGION}"
    store = DynamoStore(f"{url}&endpoint_url=http://127.0.0.1:{proxy.port}", session=aws_session())
    try:
        journal, fence, sub_id, before = claimed_session(store)
        task_id = running_task(journal, fence, sub_id)
        proxy.lose_answer(COMMIT, "drop")
        journal.start_tool(fence, task_id)
        assert proxy.lost == 1, "the proxy never faulted the commit: the test proves nothing"
        with request_counter(store) as sent:
            seen = store.read(lambda v: v.get_tool_task(task_id))
        assert seen is not None and seen.status == ToolTaskStatus.RUNNING
        assert sent[0] == "GetItem", sent  # the session's head, read: nothing taken on trust
        journal.finish_tool(fence, task_id, ToolTaskStatus.COMPLETED, "done")
        # begin_attempt, the model call, start_tool, finish_tool: one commit each.
        assert_landed_once(store, sub_id, before, commits=4)
    finally:
        store.close()


def test_a_refused_commit_reads_afresh_and_lands_once(moto_server: str) -> None:
    """Another store steers while the holder's start_tool is written from what it held: the
    TransactWriteItems is cancelled (the session's version moved), the holder drops what it
    held, reads the session and commits the transition once, the steer kept."""
    url = dynamo_url(moto_server)
    holder, other = (DynamoStore(url, session=aws_session()) for _ in range(2))
    try:
        journal, fence, sub_id, before = claimed_session(holder)
        task_id = running_task(journal, fence, sub_id)
        assert Journal(other, SystemClock(), RandomIds()).steer(SESSION, "left").steered
        with request_counter(holder) as sent:
            journal.start_tool(fence, task_id)
        assert sent[0] == sent[-1] == "TransactWriteItems" and sent.count(sent[0]) == 2, sent
        assert "GetItem" in sent, sent  # between the refused commit and the one that landed
        task = other.read(lambda v: v.get_tool_task(task_id))
        assert task is not None and task.status == ToolTaskStatus.RUNNING
        session = other.read(lambda v: v.get_session(SESSION))
        assert session is not None and session.steering == ("left",)
        # begin_attempt, the model call, the steer, start_tool: one commit each.
        assert_landed_once(other, sub_id, before, commits=4)
    finally:
        holder.close()
        other.close()
