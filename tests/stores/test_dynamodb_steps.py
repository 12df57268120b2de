"""What a step costs on the DynamoDB store, in requests (each one is billed), on moto.

Counted twice: by the store's own counter (what the bench reports) and by botocore's
``before-call`` hook on the store's clients (what was actually sent), which must agree.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_support import aws_session
from dynamo_support import dynamo_store, dynamo_url, request_counter

from bench.dynamodb_steps import (
    LONG,
    SHORT,
    measure_journal_requests,
    measure_runtime_requests,
    prefill,
)
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.core.states import ToolTaskStatus
from fxdurable.stores.dynamodb import DynamoStore

pytestmark = pytest.mark.aws
USAGE = Usage()


@pytest.fixture
def store(moto_server: str) -> Iterator[DynamoStore]:
    s = dynamo_store(moto_server)
    yield s
    s.close()


def test_the_stores_counter_is_what_botocore_sent(store: DynamoStore) -> None:
    with request_counter(store) as sent:
        before = store.requests
        model, tool = measure_journal_requests(store)
        counted = store.requests - before
    assert len(sent) == counted
    assert (model, tool) == (1, 2)  # one TransactWriteItems per transition, nothing read


@pytest.mark.parametrize("earlier", [SHORT, LONG])
def test_a_runtime_step_costs_three_requests_however_long_the_session(
    serial_moto_server: str, earlier: int
) -> None:
    """A tool step and its model call through the real Runtime: the model call with the
    call's intent, and the result (one TransactWriteItems each: the merged commits of issue
    23 §2; four requests before them) and the model request's read (one GetItem of the
    session's head), at 10 and at 200 earlier messages alike. On the serial server:
    the turn and its heartbeat write at once (tests/stores/test_moto_transaction_isolation.py)."""

    def open_store() -> DynamoStore:
        return DynamoStore(dynamo_url(serial_moto_server), session=aws_session())

    assert measure_runtime_requests(open_store, earlier) == 3


def test_a_read_after_the_stores_own_commit_is_one_get_item(store: DynamoStore) -> None:
    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    assert [m.text for m in store.read(lambda v: list(v.messages("s1")))] == ["go"]
    with request_counter(store) as sent:
        tasks = journal.record_model_call(
            fence,
            sub.id,
            round_=0,
            text="t",
            tool_calls=(),
            policies=(),
            usage=Usage(),
        ).tasks
        assert tasks == ()
        messages = store.read(lambda v: list(v.messages("s1", after=1)))
    assert [m.text for m in messages] == ["t"]
    assert sent == ["TransactWriteItems", "GetItem"]


def test_another_stores_commit_is_seen_not_served_stale(moto_server: str) -> None:
    """Store A holds the session; store B writes it; A's next read checks the head, finds
    the version moved and reads what changed, and A's next transition commits on it."""
    url = dynamo_url(moto_server)
    a = DynamoStore(url, session=aws_session())
    b = DynamoStore(url, session=aws_session())
    try:
        ja, jb = (Journal(s, SystemClock(), RandomIds()) for s in (a, b))
        sub = ja.admit("s1", agent="a", prompt="go").submission
        fence = ja.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
        assert fence is not None
        ja.begin_attempt(fence, sub.id, worker="w")
        assert a.read(lambda v: v.get_session("s1")).steering == ()
        assert jb.steer("s1", "left").steered
        assert a.read(lambda v: v.get_session("s1")).steering == ("left",)
        ja.record_model_call(
            fence,
            sub.id,
            round_=0,
            text="ok",
            tool_calls=(),
            policies=(),
            usage=Usage(),
            steering=1,
        )
        texts = [m.text for m in b.read(lambda v: list(v.messages("s1")))]
        assert texts == ["go", "left", "ok"]
    finally:
        a.close()
        b.close()


def test_prefill_builds_a_resting_session(store: DynamoStore) -> None:
    prefill(store, "long", 95)
    session = store.read(lambda v: v.get_session("long"))
    assert session is not None and session.next_message_seq == 96
    tail = store.read(lambda v: v.messages("long", after=90))
    assert [m.seq for m in tail] == [91, 92, 93, 94, 95]


def test_a_tool_step_after_a_crash_recovery_reads_the_task(store: DynamoStore) -> None:
    """A store that never saw the session (a new worker) pays its cold reads once."""
    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    (task,) = journal.record_model_call(
        fence,
        sub.id,
        round_=0,
        text="",
        tool_calls=(ToolCallRequest(name="x", arguments="{}"),),
        policies=("safe",),
        usage=Usage(),
    ).tasks
    fresh = DynamoStore(store.url, session=aws_session())
    try:
        jf = Journal(fresh, SystemClock(), RandomIds())
        with request_counter(fresh) as cold:
            jf.start_tool(fence, task.id)
        with request_counter(fresh) as warm:
            jf.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "done")
    finally:
        fresh.close()
    assert cold[-1] == "TransactWriteItems" and len(cold) > 1
    assert warm == ["TransactWriteItems"]
