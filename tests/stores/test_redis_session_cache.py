"""The Redis store's session-versioned read cache and its one-script transitions.

What a store holds of a session is good while the session's version stands: a read it can
answer costs the one round trip that checks the version (none for the lease holder's first
read after its own commit, which is that commit's state), a transition the one script that
commits it. Another store's write moves the version, and what the first store held is read
afresh, never served stale. Every test counts round trips on the store's own counter (the one
tests/stores/test_redis_store.py checks the module docstrings against).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis

from bench.redis_steps import measure_runtime_trips
from fxdurable.core.clock import SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.notify import watching
from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.core.states import SubmissionStatus, ToolTaskStatus
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import LeaseLostError
from fxdurable.stores.redis import RedisStore
from fxdurable.testing import FakeClock
from tests.stores.test_redis_store import CountingIds, dump, gap_free, prefix_of

pytestmark = pytest.mark.redis

T = TypeVar("T")
TTL = 30.0
USAGE = Usage(input_tokens=5, output_tokens=2)
WORKER_A = WorkerIdentity(host="host-a", pid=100)
WORKER_B = WorkerIdentity(host="host-b", pid=200)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000.0)


@pytest.fixture
def stores(redis_url: str) -> Iterator[Callable[[], RedisStore]]:
    """Stores over the same prefix: each its own connections and its own cache."""
    opened: list[RedisStore] = []

    def open_one() -> RedisStore:
        opened.append(RedisStore(redis_url))
        return opened[-1]

    yield open_one
    for store in opened:
        store.close()


def trips(store: RedisStore, call: Callable[[], T]) -> tuple[T, int]:
    before = store._round_trips
    result = call()
    return result, store._round_trips - before


def snapshot(view: ReadView, sub_id: str) -> tuple[Any, ...]:
    """What the runtime reads before each step (fxdurable/runtime/turn.py)."""
    sub = view.get_submission(sub_id)
    turn = view.get_turn(sub_id)
    assert sub is not None and turn is not None
    last = view.get_model_call(turn.id, turn.rounds - 1) if turn.rounds else None
    tasks = view.tool_tasks(turn.id, last.round) if last is not None else ()
    return sub, turn, last, tuple(tasks), view.get_session(sub.session_id)


def started(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> tuple[RedisStore, Journal, Fence, str]:
    """A store of its own, its journal, and a running turn of session s1 (fence, turn id)."""
    store = stores()
    journal = Journal(store, clock, CountingIds())
    return (store, journal, *running_turn(journal))


def running_turn(journal: Journal) -> tuple[Fence, str]:
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WORKER_A, ttl_s=TTL)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    return fence, sub.id


def model_call(journal: Journal, fence: Fence, turn_id: str, round_: int, n_calls: int) -> Any:
    calls = [ToolCallRequest(name="t", arguments=f'{{"i": {i}}}') for i in range(n_calls)]
    return journal.record_model_call(
        fence,
        turn_id,
        round_=round_,
        text="ok",
        tool_calls=calls,
        policies=["safe"] * n_calls,
        usage=USAGE,
    ).tasks


def test_each_transition_of_a_step_is_one_round_trip_and_each_read_one(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> None:
    store, journal, fence, sub_id = started(stores, clock)
    cost: dict[str, int] = {}
    _, cost["read"] = trips(store, lambda: journal.read(lambda v: snapshot(v, sub_id)))
    (task,), cost["record_model_call"] = trips(
        store, lambda: model_call(journal, fence, sub_id, 0, 1)
    )
    _, cost["read again"] = trips(store, lambda: journal.read(lambda v: snapshot(v, sub_id)))
    _, cost["start_tool"] = trips(store, lambda: journal.start_tool(fence, task.id))
    _, cost["finish_tool"] = trips(
        store, lambda: journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "ok")
    )
    _, cost["heartbeat"] = trips(store, lambda: journal.heartbeat(fence, ttl_s=TTL))
    model_call(journal, fence, sub_id, 1, 0)
    settled, cost["settle"] = trips(
        store, lambda: journal.settle(fence, sub_id, "completed", text="done")
    )
    more, cost["release"] = trips(store, lambda: journal.release(fence))
    assert settled.status == SubmissionStatus.COMPLETED and more is False
    assert cost == {
        "read": 1,
        "record_model_call": 1,
        "read again": 1,
        "start_tool": 1,
        "finish_tool": 1,
        "heartbeat": 1,
        "settle": 1,
        "release": 1,
    }, cost
    gap_free(journal, "s1")
    # What the cache served is what the server holds: a fresh store reads the same.
    fresh = stores()
    assert fresh.read(lambda v: snapshot(v, sub_id)) == store.read(lambda v: snapshot(v, sub_id))
    assert fresh.read(lambda v: v.messages("s1")) == store.read(lambda v: v.messages("s1"))


def test_a_hit_reads_one_round_trip(stores: Callable[[], RedisStore], clock: FakeClock) -> None:
    store, _, _, sub_id = started(stores, clock)

    def everything(view: ReadView) -> tuple[Any, ...]:
        return (
            snapshot(view, sub_id),
            view.messages("s1"),
            view.session_tool_tasks("s1"),
            view.unsettled_submissions("s1"),
            view.attempts(sub_id),
        )

    first = store.read(everything)  # fills what begin_attempt did not read
    for _ in range(3):
        again, cost = trips(store, lambda: store.read(everything))
        assert (again, cost) == (first, 1)


def test_another_writers_transition_invalidates_what_a_store_holds(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> None:
    mine, theirs = stores(), stores()
    journal = Journal(mine, clock, CountingIds())
    other = Journal(theirs, clock, CountingIds())
    fence, sub_id = running_turn(journal)
    before = journal.read(lambda v: snapshot(v, sub_id))
    assert before[4].steering == ()
    other.steer("s1", "make it blue")  # another process: this store holds the old session
    after = journal.read(lambda v: snapshot(v, sub_id))
    assert after[4].steering == ("make it blue",)
    assert after[4].version == before[4].version + 1
    assert list(journal.read(lambda v: v.events("s1")))[-1].type == "steer.recorded"
    # A transition over what a store held before another's write reruns on fresh reads:
    # the session it writes back keeps the other writer's steering.
    holder = stores()
    assert Journal(holder, clock, CountingIds()).read(lambda v: v.get_session("s1")) is not None
    other.steer("s1", "and fast")
    (task,) = model_call(Journal(holder, clock, CountingIds()), fence, sub_id, 0, 1)
    assert task.status == ToolTaskStatus.PENDING
    session = other.read(lambda v: v.get_session("s1"))
    assert session is not None and session.steering == ("make it blue", "and fast")
    gap_free(journal, "s1")


def test_a_stale_fence_leaves_every_key_unchanged(
    stores: Callable[[], RedisStore], clock: FakeClock, redis_url: str
) -> None:
    a, b = stores(), stores()
    journal_a = Journal(a, clock, CountingIds())
    old, sub_id = running_turn(journal_a)
    (task,) = model_call(journal_a, old, sub_id, 0, 1)
    journal_a.read(lambda v: snapshot(v, sub_id))  # A holds the session with its own lease
    clock.advance(TTL + 1)
    new = Journal(b, clock, CountingIds()).claim("s1", WORKER_B, ttl_s=TTL)
    assert new is not None and new.token == old.token + 1
    before = dump(redis_url)
    stale_writes: list[Callable[[], object]] = [
        lambda: journal_a.heartbeat(old, ttl_s=TTL),
        lambda: journal_a.start_tool(old, task.id),
        lambda: model_call(journal_a, old, sub_id, 1, 0),
        lambda: journal_a.settle(old, sub_id, "failed"),
    ]
    for write in stale_writes:
        with pytest.raises(LeaseLostError, match="taken over"):
            write()
    assert journal_a.release(old) is False
    assert dump(redis_url) == before


def test_concurrent_writers_keep_the_event_sequence_gap_free(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> None:
    ids = CountingIds()  # one id source: distinct submission ids across the writers
    journals = [Journal(stores(), clock, ids) for _ in range(4)]
    journals[0].admit("s1", agent="a", prompt="first", request_id="r-0")
    errors: list[BaseException] = []

    def admit_many(n: int, journal: Journal) -> None:
        try:
            for i in range(10):
                journal.admit("s1", agent="a", prompt=f"{n}.{i}", request_id=f"r-{n}-{i}")
                journal.read(lambda v: v.submissions("s1"))  # keep a (soon stale) view
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=admit_many, args=(n, j)) for n, j in enumerate(journals)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    evs = gap_free(journals[0], "s1")
    assert len(evs) == 2 + 40  # session.created, then one admission event each
    subs = journals[1].read(lambda v: v.submissions("s1"))
    assert [s.seq for s in subs] == list(range(1, 42))


def test_a_lost_script_is_loaded_again(stores: Callable[[], RedisStore], clock: FakeClock) -> None:
    store, journal, fence, _ = started(stores, clock)
    client = redis.Redis.from_url(store.url.split("?")[0])
    try:
        client.script_flush()
    finally:
        client.close()
    journal.heartbeat(fence, ttl_s=TTL)
    assert store.read(lambda v: v.get_session("s1")) is not None


def test_a_store_wide_read_in_a_transaction_still_moves_the_version(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> None:
    """A body that reads every session runs on the WATCH/MULTI path; its commit bumps the
    versions like the script path's, so a store holding the session sees the write."""
    mine, theirs = stores(), stores()
    journal = Journal(mine, clock, CountingIds())
    running_turn(journal)
    held = mine.read(lambda v: v.get_session("s1"))
    assert held is not None

    theirs.transact(steer_every_session)
    seen = mine.read(lambda v: v.get_session("s1"))
    assert seen is not None and seen.steering == ("x",) and seen.version == 99


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def steer_every_session(tx: Tx) -> None:
    """A body that reads every session (the WATCH/MULTI path) and writes the one there is."""
    (session,) = tx.list_sessions()
    tx.put_session(
        type(session)(**{**_fields(session), "steering": ("x",), "version": 99}),
        expected_version=session.version,
    )


def test_messages_past_a_cursor_come_from_what_the_store_holds(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> None:
    store, journal, fence, sub_id = started(stores, clock)
    for round_ in range(3):
        model_call(journal, fence, sub_id, round_, 0)
    fresh = stores()
    whole = fresh.read(lambda v: v.messages("s1"))
    assert [m.seq for m in whole] == [1, 2, 3, 4]
    tail, cost = trips(fresh, lambda: fresh.read(lambda v: v.messages("s1", after=2)))
    assert (tail, cost) == (whole[2:], 1)  # held whole: the version check alone
    cold = stores()
    assert cold.read(lambda v: v.messages("s1", after=3)) == whole[3:]
    model_call(journal, fence, sub_id, 3, 0)  # another store appends: the tail is read again
    assert [m.seq for m in cold.read(lambda v: v.messages("s1", after=3))] == [4, 5]
    assert [m.seq for m in cold.read(lambda v: v.messages("s1", after=1))] == [2, 3, 4, 5]
    assert store.read(lambda v: v.messages("s1")) == cold.read(lambda v: v.messages("s1"))


def test_a_writer_that_does_not_bump_the_version_is_not_overwritten(
    stores: Callable[[], RedisStore], clock: FakeClock, redis_url: str
) -> None:
    """An fxdurable from before the session version writes the session record without
    bumping it: a store holding the old record still finds out at its commit."""
    _, journal, fence, _ = started(stores, clock)
    journal.heartbeat(fence, ttl_s=TTL)  # the store holds the session as of this commit
    client = redis.Redis.from_url(redis_url.split("?")[0])
    key = f"{prefix_of(redis_url)}:session:s1"
    try:
        record = json.loads(client.get(key))  # type: ignore[arg-type]
        record["lease"]["token"] += 1  # taken over by the older writer
        record["version"] += 1
        client.set(key, json.dumps(record))
    finally:
        client.close()
    with pytest.raises(LeaseLostError, match="taken over"):
        journal.heartbeat(fence, ttl_s=TTL)


def test_a_runtime_step_costs_two_round_trips(redis_url: str) -> None:
    """A tool step plus its model call through the real Runtime (the bench's count): its two
    commits (the result; the model response with the next call's intent), one round trip
    each, and the model request's read served from the result's commit (4 when a held write
    dropped the session's cache and each read checked the version; 33 on the WATCH path with
    a snapshot read before each step)."""
    assert measure_runtime_trips(redis_url) == 2


def holding(stores: Callable[[], RedisStore]) -> tuple[RedisStore, Journal, Fence, str]:
    """A store whose journal (on the wall clock: its lease is live) runs a turn of s1."""
    store = stores()
    journal = Journal(store, SystemClock(), CountingIds())
    return (store, journal, *running_turn(journal))


def test_the_holders_first_read_after_its_commit_is_that_commits_state(
    stores: Callable[[], RedisStore],
) -> None:
    store, journal, fence, sub_id = holding(stores)
    (task,) = model_call(journal, fence, sub_id, 0, 1)
    journal.read(lambda v: snapshot(v, sub_id))  # what the commits did not write
    journal.start_tool(fence, task.id)
    first, cost = trips(store, lambda: journal.read(lambda v: snapshot(v, sub_id)))
    assert cost == 0 and [t.status for t in first[3]] == [ToolTaskStatus.RUNNING]
    again, cost = trips(store, lambda: journal.read(lambda v: snapshot(v, sub_id)))
    assert (again, cost) == (first, 1)  # served once: any later read checks the version
    # What it served is what the server holds.
    assert stores().read(lambda v: snapshot(v, sub_id)) == first
    # A write the commit did not see (another process's steer) is not in that first read;
    # the next read sees it, and the holder's next commit reruns on it and keeps it.
    journal.heartbeat(fence, ttl_s=TTL)
    Journal(stores(), SystemClock(), CountingIds()).steer("s1", "make it blue")
    stale, cost = trips(store, lambda: journal.read(lambda v: v.get_session("s1")))
    assert cost == 0 and stale is not None and stale.steering == ()
    seen, cost = trips(store, lambda: journal.read(lambda v: v.get_session("s1")))
    # The version check finds the session moved, and the session is read afresh.
    assert cost == 2 and seen is not None and seen.steering == ("make it blue",)
    journal.heartbeat(fence, ttl_s=TTL)
    kept = stores().read(lambda v: v.get_session("s1"))
    assert kept is not None and kept.steering == ("make it blue",)
    gap_free(journal, "s1")


def test_a_store_that_does_not_hold_the_lease_checks_every_read(
    stores: Callable[[], RedisStore],
) -> None:
    """An HTTP process steers (its own commit) while a worker holds the lease: its next read
    still asks the server, and sees what the worker wrote since."""
    _, journal, fence, sub_id = holding(stores)
    other = stores()
    other.read(lambda v: snapshot(v, sub_id))  # held: the snapshot a read would serve
    Journal(other, SystemClock(), CountingIds()).steer("s1", "make it blue")
    model_call(journal, fence, sub_id, 0, 1)  # the worker records the call and the steer
    seen = other.read(lambda v: snapshot(v, sub_id))
    assert seen[1].rounds == 1 and seen[4].steering == ("make it blue",)


def test_a_lease_past_its_expiry_is_not_read_from_the_commit(
    stores: Callable[[], RedisStore], clock: FakeClock
) -> None:
    """A lease the wall clock says is over may have been taken over: the read checks."""
    store, journal, fence, sub_id = started(stores, clock)  # the fake clock: long expired
    model_call(journal, fence, sub_id, 0, 1)
    _, cost = trips(store, lambda: journal.read(lambda v: snapshot(v, sub_id)))
    assert cost == 1


def test_a_commit_on_the_watch_path_is_never_read_around(
    stores: Callable[[], RedisStore],
) -> None:
    """The WATCH path's commit moves no cache, so what an earlier commit left is not served
    unchecked: the store reads its own write."""
    store, journal, fence, sub_id = holding(stores)
    model_call(journal, fence, sub_id, 0, 1)

    store.transact(steer_every_session)
    seen = store.read(lambda v: v.get_session("s1"))
    assert seen is not None and seen.steering == ("x",)


def test_a_push_makes_the_holders_next_read_check_the_version(
    stores: Callable[[], RedisStore],
) -> None:
    """The holder's first read after its own commit stands unchecked, unless a push (another
    process's steer or abort, by pub/sub) said the session moved since: the read the push
    wakes is the one that must see it (tests/runtime/test_abort_latency.py's pub/sub case)."""
    store, journal, fence, _ = holding(stores)
    notifier = store.notifier()
    woken = threading.Event()

    def pushed() -> None:  # the steering journal also wakes this process's watchers itself
        if threading.current_thread().name == "fxd-redis-interrupts":
            woken.set()

    with watching("s1", pushed):
        notifier.opened("s1")
        assert notifier.subscribed.wait(5)
        journal.heartbeat(fence, ttl_s=TTL)  # the holder's own commit: its next read is free
        Journal(stores(), SystemClock(), CountingIds()).steer("s1", "make it blue")
        assert woken.wait(5)
        seen, cost = trips(store, lambda: journal.read(lambda v: v.get_session("s1")))
    assert cost == 2 and seen is not None and seen.steering == ("make it blue",)
