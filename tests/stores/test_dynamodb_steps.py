"""What a step costs on the DynamoDB store, in requests (each one is billed), on moto.

Counted twice: by the store's own counter (what the bench reports) and by botocore's
``before-call`` hook on the store's clients (what was actually sent), which must agree.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from aws_support import aws_session
from dynamo_support import dynamo_store, dynamo_url, request_counter

from bench.dynamodb_steps import (
    FEW,
    LONG,
    MANY,
    SHORT,
    StepSplit,
    measure_journal_requests,
    measure_runtime_requests,
    measure_runtime_split,
    prefill,
)
from fxdurable.core.clock import Clock, RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.core.states import ToolTaskStatus
from fxdurable.stores import _ddb_reads
from fxdurable.stores._ddb_cache import OWN_SNAPSHOT_S
from fxdurable.stores.dynamodb import DynamoStore
from fxdurable.testing import FakeClock

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
def test_a_runtime_step_costs_two_requests_however_long_the_session(
    serial_moto_server: str, earlier: int
) -> None:
    """A tool step and its model call through the real Runtime: the result, and the model
    response with the next call's intent, one TransactWriteItems each (the merged commits of
    issue 23 §2), and nothing read: the model request's read is the holder's first after the
    result's commit, served from it (it was one GetItem of the session's head: 3; four
    requests before the merged commits), at 10 and at 200 earlier messages alike. Counted by
    operation on botocore's hook as well as on the store's counter. On the serial server: the
    turn and its heartbeat write at once (tests/stores/test_moto_transaction_isolation.py)."""
    sent: list[list[str]] = []

    def open_store() -> DynamoStore:
        store = DynamoStore(dynamo_url(serial_moto_server), session=aws_session())
        calls: list[str] = []
        sent.append(calls)
        store._api.dynamodb.meta.events.register(
            "before-call", lambda model, **_: calls.append(model.name)
        )
        return store

    assert measure_runtime_requests(open_store, earlier) == 2
    few, many = (Counter(calls) for calls in sent)
    per_step = {op: (many[op] - few[op]) / (MANY - FEW) for op in many | few}
    assert {op: n for op, n in per_step.items() if n} == {"TransactWriteItems": 2}


def test_a_runtime_model_step_is_its_one_commit(serial_moto_server: str) -> None:
    """Either side of the tool call: from the model request to the tool's start, the model
    response's commit with the call's intent; from the tool's start to the next model
    request, the result's commit, and no read (it was 1 and 2)."""

    def open_store() -> DynamoStore:
        return DynamoStore(dynamo_url(serial_moto_server), session=aws_session())

    assert measure_runtime_split(open_store, SHORT) == StepSplit(model=1, result=1)


def started(store: DynamoStore, clock: Clock | None = None) -> tuple[Journal, Fence, str]:
    """A journal on ``store`` (the wall clock by default: its lease is live) with s1 claimed
    and its attempt begun: the journal, the fence, the submission's id."""
    journal = Journal(store, clock or SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    return journal, fence, sub.id


def test_the_holders_first_read_after_its_commit_is_that_commits_state(
    store: DynamoStore,
) -> None:
    journal, fence, sub_id = started(store)
    assert [m.text for m in store.read(lambda v: list(v.messages("s1")))] == ["go"]
    with request_counter(store) as sent:
        tasks = journal.record_model_call(
            fence, sub_id, round_=0, text="t", tool_calls=(), policies=(), usage=USAGE
        ).tasks
        assert tasks == ()
        messages = store.read(lambda v: list(v.messages("s1", after=1)))
    assert [m.text for m in messages] == ["t"]
    assert sent == ["TransactWriteItems"]  # the read: that commit's state, no request
    with request_counter(store) as sent:
        again = store.read(lambda v: list(v.messages("s1", after=1)))
    assert (again, sent) == (messages, ["GetItem"])  # served once: the next checks the head


def test_a_lease_past_its_expiry_is_not_read_from_the_commit(store: DynamoStore) -> None:
    """A lease the wall clock says is over may have been taken over: the read checks."""
    _, _, sub_id = started(store, FakeClock(1_000.0))  # its lease expired long ago
    with request_counter(store) as sent:
        store.read(lambda v: v.get_submission(sub_id))
    assert sent == ["GetItem"]


def test_another_stores_commit_is_seen_not_served_stale(moto_server: str) -> None:
    """Store A holds the session; store B (an HTTP process, say) steers it: A's next read
    (not its first after its own commit) checks the head, finds the version moved and reads
    what changed, and A's next transition commits on it. B, which does not hold the lease,
    checks every read, its first after its own commit included: it sees what A wrote since."""
    url = dynamo_url(moto_server)
    a = DynamoStore(url, session=aws_session())
    b = DynamoStore(url, session=aws_session())
    try:
        ja, fence, sub_id = started(a)
        jb = Journal(b, SystemClock(), RandomIds())
        assert a.read(lambda v: v.get_session("s1")).steering == ()  # ja's commit's state
        assert a.read(lambda v: v.get_session("s1")).steering == ()  # the head checked
        b.read(lambda v: list(v.messages("s1")))  # held by B: what a read would serve
        assert jb.steer("s1", "left").steered
        assert a.read(lambda v: v.get_session("s1")).steering == ("left",)
        ja.record_model_call(
            fence,
            sub_id,
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


def test_a_read_a_poll_period_after_the_commit_checks_the_head(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupt watcher reads a poll period into a running call (which began after the
    holder's commit): that read checks the head, so an abort another process wrote meanwhile
    is seen at the first poll, not at the second (the clock the store reads moved on; the
    lease is still live)."""
    url = dynamo_url(moto_server)
    holder, other = (DynamoStore(url, session=aws_session()) for _ in range(2))
    try:
        journal, fence, sub_id = started(holder)
        call = ToolCallRequest(name="x", arguments="{}")
        (task,) = journal.record_model_call(
            fence, sub_id, round_=0, text="", tool_calls=(call,), policies=("safe",), usage=USAGE
        ).tasks
        journal.start_tool(fence, task.id)  # the call runs from here
        Journal(other, SystemClock(), RandomIds()).request_abort("s1")
        polled = time.time() + OWN_SNAPSHOT_S
        monkeypatch.setattr(_ddb_reads, "wall_clock", lambda: polled)
        with request_counter(holder) as sent:
            sub = holder.read(lambda v: v.get_submission(sub_id))
        assert sub is not None and sub.abort_requested, sent
        assert sent[0] == "GetItem"
    finally:
        holder.close()
        other.close()
