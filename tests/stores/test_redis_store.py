"""The Redis store beyond the shared contract: URLs, errors, the journal over it, races,
a server restart, and the embedded runtime and the CLI on a Redis store.

Every test that talks to Redis is marked ``redis`` and gets a key prefix of its own on the
shared test server (``redis_url``), or a dedicated server it may kill (``redis_factory``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pydantic
import pytest
import redis

import fxdurable as fx
from fxdurable.backends import open_store
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.core.records import EventRecord, SessionRecord, ToolCallRequest, Usage
from fxdurable.core.states import SessionStatus, SubmissionStatus, ToolTaskStatus
from fxdurable.core.store import ReadView, Store
from fxdurable.errors import (
    ConfigurationError,
    ConflictError,
    LeaseLostError,
    RecordNotFoundError,
    StoreError,
    StoreUnavailableError,
    Suspend,
)
from fxdurable.stores.redis import RedisStore
from fxdurable.testing import FakeClock, check_store
from fxdurable.testing.net import free_port
from tests.redis_support import dump, prefix_of

T = TypeVar("T")
T0 = 1_000.0
TTL = 30.0
WORKER_A = WorkerIdentity(host="host-a", pid=100)
WORKER_B = WorkerIdentity(host="host-b", pid=200)
USAGE = Usage(input_tokens=5, output_tokens=2)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CountingIds:
    def __init__(self) -> None:
        self._n = itertools.count(1)
        self._lock = threading.Lock()

    def new_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}-{next(self._n)}"


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStore]:
    s = RedisStore(redis_url)
    yield s
    s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def journal(store: RedisStore, clock: FakeClock) -> Journal:
    return Journal(store, clock, CountingIds())


def a_session(sid: str = "s1", **kw: Any) -> SessionRecord:
    fields: dict[str, Any] = {
        "id": sid,
        "agent": "a",
        "status": SessionStatus.IDLE,
        "created_at": 1.0,
    }
    return SessionRecord(**(fields | kw))


def violations(store: Store) -> list[str]:
    summary = store.read(lambda v: check_store(v, now=time.time()))
    return [str(v) for v in summary.violations]


def gap_free(journal: Journal, session_id: str) -> list[EventRecord]:
    evs = list(journal.read(lambda v: v.events(session_id)))
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    session = journal.read(lambda v: v.get_session(session_id))
    assert session is not None and session.next_event_seq == len(evs) + 1
    return evs


def trips(store: RedisStore, call: Callable[[], T]) -> tuple[T, int]:
    """The result of ``call`` and the round trips it cost."""
    before = store._round_trips
    result = call()
    return result, store._round_trips - before


class Query(pydantic.BaseModel):
    q: str


def closed_port() -> int:
    return free_port()  # nothing listens on it once the probing socket is closed


# -- URLs and configuration (no server needed) -----------------------------------------------


@pytest.mark.parametrize(
    ("url", "mentions"),
    [
        ("redis://", "redis://host:port/db"),
        ("redis:///0", "redis://host:port/db"),
        ("redis://127.0.0.1:6379/zero", "database must be a number"),
        ("redis://127.0.0.1:notaport/0", "not a Redis URL"),
        ("redis://127.0.0.1:6379/0?prefix=a:b", "prefix"),
        ("redis://127.0.0.1:6379/0?prefix=", "prefix"),
        ("redis://127.0.0.1:6379/0?prefx=fxd", "prefx"),
        ("redis://127.0.0.1:6379/0?db=3", "db"),
        ("redis://127.0.0.1:6379/0?socket_timeout=soon", "socket_timeout"),
        ("redis://127.0.0.1:6379/0?ssl_cert_reqs=none", "ssl_cert_reqs"),  # not rediss://
        ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
    ],
)
def test_bad_urls_are_configuration_errors(url: str, mentions: str) -> None:
    """Refused before any connection is attempted (nothing listens on most of these)."""
    with pytest.raises(ConfigurationError, match=mentions):
        RedisStore(url)


def test_configuration_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        RedisStore("redis://user:hunter2@127.0.0.1:6379/0?bogus=1")
    assert "hunter2" not in str(info.value)
    assert "user:***@127.0.0.1:6379" in str(info.value)


def test_an_unreachable_server_is_a_store_error_naming_it_without_the_password() -> None:
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(StoreError) as info:
        RedisStore(f"redis://:hunter2@127.0.0.1:{port}/0")
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message
    assert "hunter2" not in message
    assert time.monotonic() - started < 15  # a few reconnect attempts, not a hang


def test_a_missing_redis_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "redis" or m.startswith("redis.")]:
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "fxdurable.stores.redis")
    monkeypatch.delitem(sys.modules, "fxdurable.stores._redis_tx")
    with pytest.raises(ConfigurationError, match=r"pip install 'fxdurable\[redis\]'"):
        open_store("redis://127.0.0.1:6379/0")


# -- opening ---------------------------------------------------------------------------------


@pytest.mark.redis
def test_open_store_picks_redis(redis_url: str) -> None:
    store = open_store(redis_url)
    try:
        assert isinstance(store, RedisStore)
        assert store.url == redis_url
    finally:
        store.close()


@pytest.mark.redis
def test_passwords_are_redacted_and_wrong_ones_refused(redis_factory: Callable[..., Any]) -> None:
    server = redis_factory()  # its own server: the shared one keeps no password
    client = redis.Redis.from_url(server.url)
    client.config_set("requirepass", "hunter2")
    client.close()
    store = open_store(f"redis://:hunter2@127.0.0.1:{server.port}/0")
    try:
        assert store.url == f"redis://:***@127.0.0.1:{server.port}/0"
        store.transact(lambda tx: tx.put_session(a_session(), expected_version=None))
    finally:
        store.close()
    with pytest.raises(StoreError, match="credentials") as info:
        RedisStore(f"redis://:wrong@127.0.0.1:{server.port}/0")
    assert "wrong" not in str(info.value)
    assert f"127.0.0.1:{server.port}" in str(info.value)


@pytest.mark.redis
def test_read_only_open_refuses_an_empty_prefix_and_writes_nothing(redis_url: str) -> None:
    with pytest.raises(StoreError, match="no fxdurable store"):
        RedisStore(redis_url, create=False)
    assert dump(redis_url) == {}
    RedisStore(redis_url).close()  # create=True writes the marker
    assert list(dump(redis_url)) == [f"{prefix_of(redis_url)}:schema".encode()]
    store = RedisStore(redis_url, create=False)
    store.close()


@pytest.mark.redis
def test_a_foreign_layout_version_is_refused(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        client.set(f"{prefix_of(redis_url)}:schema", "99")
    finally:
        client.close()
    for create in (True, False):
        with pytest.raises(StoreError, match="matching fxdurable"):
            RedisStore(redis_url, create=create)


@pytest.mark.redis
def test_prefixes_keep_deployments_apart(redis_url: str) -> None:
    other_url = redis_url.replace("prefix=", "prefix=other")
    a, b = RedisStore(redis_url), RedisStore(other_url)
    session = SessionRecord(id="s1", agent="a", status=SessionStatus.IDLE, created_at=1.0)
    try:
        a.transact(lambda tx: tx.put_session(session, expected_version=None))
        b.transact(lambda tx: tx.put_session(session, expected_version=None))  # no conflict
        assert [s.id for s in b.read(lambda r: r.list_sessions())] == ["s1"]
    finally:
        a.close()
        b.close()
        client = redis.Redis.from_url(other_url.split("?")[0])  # redis_url drops only its own
        client.delete(*client.scan_iter(match=f"{prefix_of(other_url)}:*"))
        client.close()


@pytest.mark.redis
def test_ids_with_colons_do_not_collide(store: RedisStore) -> None:
    """Keys end with the id, so session "a:events" is not the events of session "a"."""

    def body(tx: Any) -> None:
        for sid in ("a", "a:events", "events:a"):
            tx.put_session(
                SessionRecord(id=sid, agent="x", status=SessionStatus.ACTIVE, created_at=1.0),
                expected_version=None,
            )
            tx.append_event(
                EventRecord(session_id=sid, seq=1, type=sid, turn_id=None, data={}, at=1.0)
            )

    store.transact(body)
    for sid in ("a", "a:events", "events:a"):
        assert [e.type for e in store.read(lambda r, s=sid: r.events(s))] == [sid]
    assert [s.id for s in store.read(lambda r: r.active_sessions())] == [
        "a",
        "a:events",
        "events:a",
    ]


@pytest.mark.redis
def test_a_read_view_cannot_write(store: RedisStore) -> None:
    session = SessionRecord(id="s1", agent="a", status=SessionStatus.IDLE, created_at=1.0)
    with pytest.raises(TypeError, match="transact"):
        store.read(lambda r: r.put_session(session, expected_version=None))  # type: ignore[attr-defined]


@pytest.mark.redis
def test_an_async_body_is_refused_and_writes_nothing(store: RedisStore, redis_url: str) -> None:
    before = dump(redis_url)
    session = SessionRecord(id="s1", agent="a", status=SessionStatus.IDLE, created_at=1.0)

    async def body(tx: Any) -> None:
        tx.put_session(session, expected_version=None)

    def sync_part(tx: Any) -> Any:
        tx.put_session(session, expected_version=None)
        return body(tx)

    with pytest.raises(TypeError, match="synchronous"):
        store.transact(sync_part)
    assert dump(redis_url) == before


@pytest.mark.redis
def test_the_store_is_unusable_after_close(redis_url: str) -> None:
    store = RedisStore(redis_url)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.read(lambda r: r.get_session("s1"))


# -- the journal over Redis ------------------------------------------------------------------


def _whole_turn(journal: Journal, store: RedisStore) -> dict[str, int]:
    """One turn with one tool call; returns the round trips of each transition."""
    cost: dict[str, int] = {}
    admission, cost["admit"] = trips(store, lambda: journal.admit("s1", agent="a", prompt="go"))
    fence, cost["claim"] = trips(store, lambda: journal.claim("s1", WORKER_A, ttl_s=TTL))
    assert fence is not None
    sub_id = admission.submission.id
    start, cost["begin_attempt"] = trips(
        store, lambda: journal.begin_attempt(fence, sub_id, worker="w")
    )
    call = ToolCallRequest(name="shell", arguments='{"cmd": "ls"}', provider_id="c1")
    tasks, cost["record_model_call"] = trips(
        store,
        lambda: (
            journal.record_model_call(
                fence,
                start.turn.id,
                round_=0,
                text="running",
                tool_calls=[call],
                policies=["unsafe"],
                usage=USAGE,
            ).tasks
        ),
    )
    (task,) = tasks
    _, cost["start_tool"] = trips(store, lambda: journal.start_tool(fence, task.id))
    _, cost["finish_tool"] = trips(
        store, lambda: journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "ok")
    )
    journal.record_model_call(
        fence,
        start.turn.id,
        round_=1,
        text="done",
        tool_calls=[],
        policies=[],
        usage=USAGE,
    )
    _, cost["heartbeat"] = trips(store, lambda: journal.heartbeat(fence, ttl_s=TTL))
    settled, cost["settle"] = trips(
        store, lambda: journal.settle(fence, sub_id, "completed", text="done")
    )
    assert settled.status == SubmissionStatus.COMPLETED
    more, cost["release"] = trips(store, lambda: journal.release(fence))
    assert more is False
    return cost


@pytest.mark.redis
def test_a_whole_turn_through_the_journal(journal: Journal, store: RedisStore) -> None:
    cost = _whole_turn(journal, store)
    evs = gap_free(journal, "s1")
    assert [e.type for e in evs] == [
        "session.created",
        "submission.admitted",
        "turn.started",
        "attempt.started",
        "model.completed",
        "tool.started",
        "tool.completed",
        "model.completed",
        "submission.completed",
    ]
    session = journal.read(lambda r: r.get_session("s1"))
    assert session is not None and session.status == SessionStatus.IDLE
    assert session.lease.owner is None and session.lease.token == 1
    messages = journal.read(lambda r: r.messages("s1"))
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    (sub,) = journal.read(lambda r: r.submissions("s1"))
    assert journal.read(lambda r: r.unsettled_submissions("s1")) == []
    assert [c.round for c in journal.read(lambda r: r.model_calls(sub.id))] == [0, 1]
    assert [a.status.value for a in journal.read(lambda r: r.attempts(sub.id))] == ["finished"]
    assert journal.read(lambda r: r.active_sessions()) == []
    assert violations(store) == []
    # The round trips the module docstring promises: a transition whose session the store
    # holds costs its one commit script; a first read of a key one more (admit: the request id
    # and the session; begin_attempt: the queue, the attempts and the turn; settle: the turn's
    # tool tasks, which nothing read before in this journal-only turn; the runtime reads them
    # each step). A regression here is a per-step latency regression.
    assert cost == {
        "admit": 3,
        "claim": 1,
        "begin_attempt": 4,
        "record_model_call": 1,
        "start_tool": 1,
        "finish_tool": 1,
        "heartbeat": 1,
        "settle": 2,
        "release": 1,
    }, cost


@pytest.mark.redis
def test_a_stale_fence_writes_nothing(
    journal: Journal, store: RedisStore, clock: FakeClock, redis_url: str
) -> None:
    admission = journal.admit("s1", agent="a", prompt="go")
    old = journal.claim("s1", WORKER_A, ttl_s=TTL)
    assert old is not None
    start = journal.begin_attempt(old, admission.submission.id, worker="a")
    clock.advance(TTL + 1)  # worker A stalls past its lease; B takes over
    new = journal.claim("s1", WORKER_B, ttl_s=TTL)
    assert new is not None and new.token == old.token + 1
    before = dump(redis_url)

    stale_writes: list[Callable[[], object]] = [
        lambda: journal.heartbeat(old, ttl_s=TTL),
        lambda: journal.record_model_call(
            old,
            start.turn.id,
            round_=0,
            text="zombie",
            tool_calls=[],
            policies=[],
            usage=USAGE,
        ),
        lambda: journal.record_partial(old, start.turn.id, round_=0, text="zombie"),
        lambda: journal.suspend(old, admission.submission.id, reason="deadline"),
        lambda: journal.settle(old, admission.submission.id, "completed", text="zombie"),
    ]
    for write in stale_writes:
        with pytest.raises(LeaseLostError):
            write()
        assert dump(redis_url) == before
    assert journal.release(old) is False  # a no-op for the old owner: the new one has the work
    assert dump(redis_url) == before


def _race(n: int, target: Callable[[int], T]) -> list[T]:
    """Run ``target(i)`` in ``n`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    return results


@pytest.mark.redis
def test_racing_admissions_all_succeed_with_distinct_seqs(redis_url: str) -> None:
    """Separate stores (separate connections, as separate processes would have)."""
    n = 4
    stores = [RedisStore(redis_url) for _ in range(n)]
    ids = CountingIds()
    journals = [Journal(s, FakeClock(T0), ids) for s in stores]
    try:
        for round_ in range(10):
            sid = f"s{round_}"
            admissions = _race(
                n,
                lambda i, sid=sid: journals[i].admit(
                    sid, agent="a", prompt=f"p{i}", request_id=f"{sid}-r{i}"
                ),
            )
            assert all(a.created for a in admissions)
            assert sorted(a.submission.seq for a in admissions) == list(range(1, n + 1))
            evs = gap_free(journals[0], sid)
            assert len(evs) == 1 + n  # session.created + one admission each
            subs = journals[0].read(lambda r, sid=sid: r.submissions(sid))
            assert [s.seq for s in subs] == list(range(1, n + 1))
            assert len(journals[0].read(lambda r, sid=sid: r.unsettled_submissions(sid))) == n
        assert violations(stores[0]) == []
    finally:
        for s in stores:
            s.close()


@pytest.mark.redis
def test_racing_admissions_of_one_request_id_admit_it_once(redis_url: str) -> None:
    n = 4
    stores = [RedisStore(redis_url) for _ in range(n)]
    journals = [Journal(s, FakeClock(T0), CountingIds()) for s in stores]
    try:
        admissions = _race(
            n, lambda i: journals[i].admit("s1", agent="a", prompt="p", request_id="same")
        )
        assert sum(a.created for a in admissions) == 1
        assert len({a.submission.id for a in admissions}) == 1
        assert len(journals[0].read(lambda r: r.submissions("s1"))) == 1
        gap_free(journals[0], "s1")
    finally:
        for s in stores:
            s.close()


@pytest.mark.redis
def test_racing_claims_yield_exactly_one_fence(redis_url: str) -> None:
    n = 5
    stores = [RedisStore(redis_url) for _ in range(n)]
    clock = FakeClock(T0)
    journals = [Journal(s, clock, CountingIds()) for s in stores]
    try:
        for round_ in range(10):
            sid = f"s{round_}"
            journals[0].admit(sid, agent="a", prompt="go")
            workers = [WorkerIdentity(host=f"h{i}", pid=i) for i in range(n)]
            fences = _race(n, lambda i, sid=sid, w=workers: journals[i].claim(sid, w[i], ttl_s=TTL))
            won = [f for f in fences if f is not None]
            assert len(won) == 1, fences
            session = journals[0].read(lambda r, sid=sid: r.get_session(sid))
            assert session is not None
            assert (session.lease.owner, session.lease.token) == (won[0].owner, won[0].token)
            assert won[0].token == 1
    finally:
        for s in stores:
            s.close()


@pytest.mark.redis
def test_version_conflicts_between_stores(redis_url: str) -> None:
    """A conditional write through one handle sees a commit made through another."""
    a, b = RedisStore(redis_url), RedisStore(redis_url)
    v1 = SessionRecord(id="s1", agent="a", status=SessionStatus.IDLE, created_at=1.0)
    v2 = SessionRecord(id="s1", agent="a", status=SessionStatus.ACTIVE, created_at=1.0, version=2)
    try:
        a.transact(lambda tx: tx.put_session(v1, expected_version=None))
        b.transact(lambda tx: tx.put_session(v2, expected_version=1))
        with pytest.raises(ConflictError):
            a.transact(lambda tx: tx.put_session(v2, expected_version=1))
    finally:
        a.close()
        b.close()


@pytest.mark.redis
def test_a_body_runs_again_when_what_it_read_changes(store: RedisStore, redis_url: str) -> None:
    """The first run reads, another client writes the key, the commit fails, the body runs again
    on fresh data: the WATCH turns a lost race into a retry, not a lost update."""
    v1 = SessionRecord(id="s1", agent="a", status=SessionStatus.IDLE, created_at=1.0)
    store.transact(lambda tx: tx.put_session(v1, expected_version=None))
    other = RedisStore(redis_url)
    runs: list[int] = []

    def body(tx: Any) -> int:
        session = tx.get_session("s1")
        runs.append(session.version)
        if len(runs) == 1:  # meanwhile, someone else commits
            bumped = SessionRecord(**{**_fields(session), "version": session.version + 1})
            other.transact(lambda o: o.put_session(bumped, expected_version=session.version))
        mine = SessionRecord(**{**_fields(session), "version": session.version + 1})
        tx.put_session(mine, expected_version=session.version)
        return int(session.version)

    try:
        assert store.transact(body) == 2
        assert runs == [1, 2]
        final = store.read(lambda r: r.get_session("s1"))
        assert final is not None and final.version == 3
    finally:
        other.close()


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


@pytest.mark.redis
def test_read_is_a_consistent_snapshot(store: RedisStore, redis_url: str) -> None:
    """A read that another client interrupts between two of its queries runs again."""
    v1 = SessionRecord(id="s1", agent="a", status=SessionStatus.IDLE, created_at=1.0)
    store.transact(lambda tx: tx.put_session(v1, expected_version=None))
    other = RedisStore(redis_url)
    runs: list[int] = []

    def body(view: ReadView) -> tuple[int, int]:
        runs.append(1)
        session = view.get_session("s1")
        assert session is not None
        if len(runs) == 1:  # between the two queries of the first run, a writer commits
            event = EventRecord(session_id="s1", seq=1, type="x", turn_id=None, data={}, at=1.0)
            moved = SessionRecord(**{**_fields(session), "next_event_seq": 2, "version": 2})

            def write(tx: Any) -> None:
                tx.append_event(event)
                tx.put_session(moved, expected_version=1)

            other.transact(write)
        return (session.next_event_seq, len(view.events("s1")))

    try:
        assert store.read(body) == (2, 1)  # never the torn (1, 1)
        assert len(runs) == 2
    finally:
        other.close()


# -- the server restarts ---------------------------------------------------------------------


@pytest.mark.redis
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_committed_data_survives_a_server_restart(
    redis_factory: Callable[..., Any], how: signal.Signals
) -> None:
    """AOF on: what a commit acknowledged is there after the server comes back, and the
    same store object carries on (it reconnects and reloads its commit script)."""
    server = redis_factory(fsync="always")
    url = f"{server.url}/0?prefix=restart"
    store = RedisStore(url)
    clock = FakeClock(T0)
    journal = Journal(store, clock, CountingIds())
    try:
        admission = journal.admit("s1", agent="a", prompt="before the restart")
        fence = journal.claim("s1", WORKER_A, ttl_s=TTL)
        assert fence is not None
        journal.begin_attempt(fence, admission.submission.id, worker="a")
        before = journal.read(lambda r: (r.get_session("s1"), r.events("s1")))

        server.restart(how)

        after = journal.read(lambda r: (r.get_session("s1"), r.events("s1")))
        assert after == before
        # Writes carry on through the same store: a new transaction reconnects and, the
        # server's script cache being empty, loads the commit script again.
        journal.admit("s1", agent="a", prompt="after the restart")
        assert [s.seq for s in journal.read(lambda r: r.submissions("s1"))] == [1, 2]
        gap_free(journal, "s1")
        fresh = RedisStore(url, create=False)
        try:
            assert violations(fresh) == []
            assert len(fresh.read(lambda r: r.events("s1"))) == len(before[1]) + 1
        finally:
            fresh.close()
    finally:
        store.close()


@pytest.mark.redis
def test_a_server_that_stays_down_is_a_store_error(redis_factory: Callable[..., Any]) -> None:
    server = redis_factory()
    url = f"{server.url}/0?prefix=down"
    store = RedisStore(url)
    try:
        server.stop(signal.SIGKILL)
        with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{server.port}"):
            store.read(lambda r: r.get_session("s1"))
        with pytest.raises(StoreUnavailableError, match="cannot reach"):
            RedisStore(url)
    finally:
        store.close()


@pytest.mark.redis
def test_a_server_that_does_not_answer_in_time_is_unavailable(
    redis_factory: Callable[..., Any],
) -> None:
    """A paused server (as one stuck in a long command) times out as StoreUnavailableError,
    not redis-py's TimeoutError."""
    server = redis_factory()
    store = RedisStore(f"{server.url}/0?prefix=slow&socket_timeout=0.3")
    journal = Journal(store, FakeClock(T0), CountingIds())
    admin = redis.Redis.from_url(server.url)
    try:
        admin.client_pause(2000, all=True)
        with pytest.raises(StoreUnavailableError, match="did not answer in time"):
            journal.admit("s1", agent="a", prompt="hello")
    finally:
        admin.client_unpause()
        admin.close()
        store.close()


@pytest.mark.redis
def test_ctrl_c_while_letting_go_of_a_connection_is_not_swallowed(
    redis_factory: Callable[..., Any],
) -> None:
    """A KeyboardInterrupt that lands while the store UNWATCHes the connection of a body that
    ended by a control-flow signal propagates (it used to be swallowed, and the signal raised
    instead); the connection is not reused and the store carries on."""
    server = redis_factory()
    store = RedisStore(f"{server.url}/0?prefix=ctrlc")
    admin = redis.Redis.from_url(server.url)

    def body(tx: Any) -> None:
        tx.list_sessions()  # a store-wide read: the body runs on the WATCH/MULTI path
        tx.get_session("s1")  # WATCHed: letting go of the connection sends UNWATCH
        admin.client_pause(1500, all=True)  # ... which then waits for the pause to end
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        raise Suspend("stop here")

    try:
        with pytest.raises(KeyboardInterrupt):
            store.transact(body)
        admin.client_unpause()
        assert store.read(lambda r: r.get_session("s1")) is None
        # Nothing is left counted in flight, so close() does not wait out its 30 s for a
        # transaction that ended with the interrupt (it did: this test took 33 s).
        assert store._in_flight == 0
    finally:
        admin.client_unpause()
        admin.close()
        store.close()


# -- the embedded runtime and the CLI --------------------------------------------------------


@pytest.mark.redis
def test_the_runtime_runs_a_turn_on_redis_and_the_cli_reads_it(redis_url: str) -> None:
    calls: list[str] = []

    @fx.tool
    def lookup(inp: Query, ctx: fx.ToolContext) -> str:
        "Look something up."
        calls.append(inp.q)
        return inp.q.upper()

    model = fx.ScriptedModel(
        [fx.reply("checking", fx.call("lookup", q="redis")), fx.reply("it is REDIS")]
    )
    agent = fx.Agent("eng", model, tools=[lookup])
    settings = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)

    async def main() -> None:
        async with fx.Runtime([agent], store=redis_url, settings=settings) as rt:
            assert await rt.session("s1").run("what is it?", timeout=20) == "it is REDIS"
            assert calls == ["redis"]
            deadline = asyncio.get_running_loop().time() + 5
            while True:  # the lease is released just after the submission settles
                session = rt.journal.read(lambda r: r.get_session("s1"))
                if session is not None and session.lease.owner is None:
                    break
                assert asyncio.get_running_loop().time() < deadline, session
                await asyncio.sleep(0.02)
            summary = rt.journal.read(lambda v: check_store(v, now=time.time(), at_rest=True))
            assert summary.violations == ()
            assert (summary.sessions, summary.submissions, summary.tool_tasks) == (1, 1, 1)

    asyncio.run(asyncio.wait_for(main(), 60))

    env = {**os.environ, "PYTHONPATH": REPO}
    check = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--store", redis_url, "--at-rest"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("ok: 1 sessions, 1 submissions, 1 tool tasks"), check.stdout

    trace = subprocess.run(
        [sys.executable, "-m", "fxdurable", "trace", "s1", "--store", redis_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert trace.returncode == 0, trace.stdout + trace.stderr
    assert "session s1" in trace.stdout and "lookup" in trace.stdout, trace.stdout
    assert "submission" in trace.stdout and "completed" in trace.stdout, trace.stdout

    missing = subprocess.run(
        [sys.executable, "-m", "fxdurable", "trace", "s1", "--store", redis_url + "x"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert missing.returncode == 2
    assert "no fxdurable store" in missing.stderr, missing.stderr


@pytest.mark.redis
def test_a_torn_view_error_runs_the_body_again(store: RedisStore, redis_url: str) -> None:
    """A body that raises because two of its reads disagree (another client committed
    between them) is run again, not reported: a serial run could never have seen that."""
    v1 = a_session(status=SessionStatus.ACTIVE)
    store.transact(lambda tx: tx.put_session(v1, expected_version=None))
    other = RedisStore(redis_url)
    runs: list[int] = []

    def body(tx: Any) -> int:
        runs.append(1)
        session = tx.get_session("s1")
        if len(runs) == 1:
            moved = SessionRecord(**{**_fields(session), "next_event_seq": 2, "version": 2})
            event = EventRecord(session_id="s1", seq=1, type="x", turn_id=None, data={}, at=1.0)

            def write(o: Any) -> None:
                o.append_event(event)
                o.put_session(moved, expected_version=1)

            other.transact(write)
        if len(tx.events("s1")) != session.next_event_seq - 1:
            raise ValueError("torn view: the session and its events disagree")
        return len(runs)

    try:
        assert store.transact(body) == 2
    finally:
        other.close()


@pytest.mark.redis
def test_an_evicting_server_is_refused(redis_factory: Callable[..., Any]) -> None:
    server = redis_factory()
    client = redis.Redis.from_url(server.url)
    try:
        client.config_set("maxmemory-policy", "allkeys-lru")
        with pytest.raises(StoreError, match="noeviction"):
            RedisStore(f"{server.url}/0")
        client.config_set("maxmemory-policy", "volatile-lru")  # only commit tokens expire
        RedisStore(f"{server.url}/0").close()
    finally:
        client.close()


@pytest.mark.redis
def test_a_server_without_an_append_only_file_is_refused(
    redis_factory: Callable[..., Any],
) -> None:
    """Started with --appendonly no: a restart would lose committed steps, so opening a store
    to write is refused with how to enable the AOF, unless the URL opts out."""
    server = redis_factory(appendonly=False)
    url = f"{server.url}/0?prefix=p"
    with pytest.raises(ConfigurationError, match="appendonly no") as info:
        RedisStore(url)
    for advice in ("appendonly yes", "appendfsync everysec", "redis-server --appendonly yes"):
        assert advice in str(info.value)
    assert "?durability=none" in str(info.value)
    RedisStore(f"{url}&durability=none").close()  # the explicit opt-out opens it
    RedisStore(url, create=False).close()  # a reader writes nothing: not its concern
    client = redis.Redis.from_url(server.url)
    try:
        client.config_set("save", "60 1")  # RDB snapshots alone lose the last minutes
        with pytest.raises(ConfigurationError, match="RDB snapshots alone"):
            RedisStore(url)
        client.config_set("appendonly", "yes")
        RedisStore(url).close()  # with the AOF it opens
        client.config_set("appendfsync", "no")
        with pytest.raises(ConfigurationError, match="appendfsync no"):
            RedisStore(url)
    finally:
        client.close()


@pytest.mark.redis
def test_a_user_who_may_not_read_info_cannot_open_a_store_to_write(
    redis_factory: Callable[..., Any],
) -> None:
    """Without INFO the store cannot tell whether the server persists: refused, saying so."""
    server = redis_factory()
    client = redis.Redis.from_url(server.url)
    try:
        client.acl_setuser("noinfo", enabled=True, passwords=["+secret"], keys=["*"],
                           commands=["+@all", "-info"])  # fmt: skip
        url = f"redis://noinfo:secret@127.0.0.1:{server.port}/0?prefix=p"
        with pytest.raises(ConfigurationError, match="INFO persistence was refused"):
            RedisStore(url)
        RedisStore(f"{url}&durability=none").close()
    finally:
        client.close()


def test_durability_takes_aof_or_none() -> None:
    with pytest.raises(ConfigurationError, match="durability must be aof"):
        RedisStore("redis://127.0.0.1:1/0?durability=rdb")


@pytest.mark.redis
def test_no_key_has_a_ttl(journal: Journal, store: RedisStore, redis_url: str) -> None:
    """Nothing durable may depend on expiry: leases are timestamps in the session record.
    Only the commits' tokens (the replies a resend after a lost answer reads) expire."""
    _whole_turn(journal, store)
    journal.admit("s1", agent="a", prompt="again")
    client = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        keys = list(client.scan_iter(match=f"{prefix_of(redis_url)}:*"))
        tokens = [k for k in keys if k.startswith(f"{prefix_of(redis_url)}:tok:".encode())]
        keys = [k for k in keys if k not in tokens]
        assert len(keys) > 10
        assert {k: client.ttl(k) for k in keys} == {k: -1 for k in keys}
        assert tokens and all(0 < client.ttl(k) <= 600 for k in tokens)
    finally:
        client.close()


@pytest.mark.redis
def test_workers_and_admissions_racing_never_fork_the_journal(redis_url: str) -> None:
    """Three workers (each with its own store, as processes would have) drain three sessions
    while four clients keep admitting to them: every submission settles exactly once, in
    order, and the store passes every invariant."""
    sessions = ("s0", "s1", "s2")
    admitted_per_client = 12
    clock = FakeClock(T0)
    ids = CountingIds()
    stores = [RedisStore(redis_url) for _ in range(7)]
    journals = [Journal(s, clock, ids) for s in stores]
    admitting = threading.Event()
    admitting.set()

    def client(i: int) -> None:
        for n in range(admitted_per_client):
            sid = sessions[(i + n) % len(sessions)]
            journals[i].admit(sid, agent="a", prompt=f"{i}/{n}", request_id=f"c{i}-{n}")

    failures: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            drain(journals[4 + i], WorkerIdentity(host=f"w{i}", pid=i))
        except BaseException as exc:
            failures.append(exc)

    def drain(journal: Journal, me: WorkerIdentity) -> None:
        while True:
            idle = True
            for sid in sessions:
                try:
                    fence = journal.claim(sid, me, ttl_s=TTL)
                except RecordNotFoundError:
                    continue  # not admitted yet
                if fence is None:
                    continue
                try:
                    while unsettled := journal.read(lambda r, s=sid: r.unsettled_submissions(s)):
                        idle = False
                        start = journal.begin_attempt(fence, unsettled[0].id, worker=me.host)
                        journal.record_model_call(
                            fence,
                            start.turn.id,
                            round_=0,
                            text="ok",
                            tool_calls=[],
                            policies=[],
                            usage=USAGE,
                        )
                        journal.settle(fence, start.submission.id, "completed", text="ok")
                finally:
                    journal.release(fence)
            if idle and not admitting.is_set():
                return

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        _race(4, client)
        admitting.clear()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        assert failures == []
        summary = stores[0].read(lambda v: check_store(v, now=T0, at_rest=True))
        assert summary.violations == ()
        assert summary.submissions == 4 * admitted_per_client
        for sid in sessions:
            subs = journals[0].read(lambda r, s=sid: r.submissions(s))
            assert all(s.status == SubmissionStatus.COMPLETED and s.attempts == 1 for s in subs)
            evs = gap_free(journals[0], sid)
            settled = [e.data["submission"] for e in evs if e.type == "submission.completed"]
            assert settled == [s.id for s in subs]  # once each, in admission order
    finally:
        for s in stores:
            s.close()
