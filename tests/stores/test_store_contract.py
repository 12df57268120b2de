"""The store contract, run against every backend by a parametrised fixture.

The ``store`` fixture (one store per backend) is in tests/stores/conftest.py, where a new
backend is added. The tests below use only the
:class:`~fxdurable.core.store.Store` protocol; SQLite specifics live at the bottom of the file
and Redis specifics in test_redis_store.py.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fxdurable.backends import open_store
from fxdurable.core.records import (
    AttemptRecord,
    ErrorInfo,
    EventRecord,
    Lease,
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolCallRequest,
    ToolTaskRecord,
    TurnRecord,
    Usage,
)
from fxdurable.core.states import (
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
)
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.errors import ConfigurationError, ConflictError
from fxdurable.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from fxdurable.core.journal import Fence, Journal


# -- record builders -------------------------------------------------------------------------


def a_session(sid: str = "s1", **kw: Any) -> SessionRecord:
    fields: dict[str, Any] = {
        "id": sid,
        "agent": "agent",
        "status": SessionStatus.ACTIVE,
        "created_at": 1.0,
    }
    return SessionRecord(**(fields | kw))


def a_submission(sid: str = "s1", seq: int = 1, **kw: Any) -> SubmissionRecord:
    fields: dict[str, Any] = {
        "id": f"{sid}-sub{seq}",
        "session_id": sid,
        "seq": seq,
        "request_id": f"{sid}-req{seq}",
        "prompt": f"prompt {seq}",
        "status": SubmissionStatus.QUEUED,
        "created_at": 1.0,
    }
    return SubmissionRecord(**(fields | kw))


def an_event(sid: str = "s1", seq: int = 1) -> EventRecord:
    return EventRecord(
        session_id=sid, seq=seq, type=f"e{seq}", turn_id=None, data={"n": seq}, at=float(seq)
    )


def a_task(turn_id: str = "t1", round_: int = 0, index: int = 0, **kw: Any) -> ToolTaskRecord:
    fields: dict[str, Any] = {
        "id": f"{turn_id}/r{round_}/t{index}",
        "session_id": "s1",
        "turn_id": turn_id,
        "round": round_,
        "index": index,
        "tool": "shell",
        "arguments": "{}",
        "provider_id": None,
        "policy": "unsafe",
        "status": ToolTaskStatus.PENDING,
        "execution_id": "x1",
        "updated_at": 1.0,
    }
    return ToolTaskRecord(**(fields | kw))


def write(store: Store, body: Callable[[Tx], object]) -> object:
    return store.transact(body)


def look(store: Store, body: Callable[[ReadView], Any]) -> Any:
    return store.read(body)


class Boom(Exception):
    pass


# -- conditional writes ----------------------------------------------------------------------


def test_insert_if_absent_conflicts(store: Store) -> None:
    write(store, lambda tx: tx.put_session(a_session(), expected_version=None))
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_session(a_session(agent="other"), expected_version=None))
    assert look(store, lambda r: r.get_session("s1")) == a_session()


@pytest.mark.parametrize(
    "put",
    [
        lambda tx: tx.put_submission(a_submission(), expected_version=None),
        lambda tx: tx.put_attempt(
            AttemptRecord(
                submission_id="s1-sub1",
                number=1,
                status=AttemptStatus.RUNNING,
                worker="w",
                started_at=1.0,
            ),
            expected_version=None,
        ),
        lambda tx: tx.put_turn(
            TurnRecord(
                id="t1", session_id="s1", submission_id="s1-sub1", status=TurnStatus.RUNNING
            ),
            expected_version=None,
        ),
        lambda tx: tx.put_tool_task(a_task(), expected_version=None),
        lambda tx: tx.insert_model_call(
            ModelCallRecord(
                turn_id="t1", round=0, status=ModelCallStatus.COMPLETED, text="", created_at=1.0
            )
        ),
        lambda tx: tx.append_message(
            MessageRecord(session_id="s1", seq=1, turn_id="t1", role="user", text="x")
        ),
        lambda tx: tx.append_event(an_event()),
    ],
    ids=["submission", "attempt", "turn", "tool_task", "model_call", "message", "event"],
)
def test_every_insert_is_if_absent(store: Store, put: Callable[[Tx], None]) -> None:
    write(store, put)
    with pytest.raises(ConflictError):
        write(store, put)


def test_duplicate_request_id_conflicts(store: Store) -> None:
    """Idempotency lives in the schema: one submission per request id."""
    write(store, lambda tx: tx.put_submission(a_submission(), expected_version=None))
    dup = a_submission(seq=2, request_id="s1-req1")
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_submission(dup, expected_version=None))


def test_duplicate_submission_position_conflicts(store: Store) -> None:
    write(store, lambda tx: tx.put_submission(a_submission(), expected_version=None))
    dup = a_submission(id="other", request_id="other")
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_submission(dup, expected_version=None))


def test_duplicate_tool_task_position_conflicts(store: Store) -> None:
    write(store, lambda tx: tx.put_tool_task(a_task(), expected_version=None))
    dup = a_task(id="another-id")
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_tool_task(dup, expected_version=None))


def test_duplicate_event_seq_conflicts(store: Store) -> None:
    write(store, lambda tx: tx.append_event(an_event("s1", 1)))
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.append_event(an_event("s1", 1)))
    write(store, lambda tx: tx.append_event(an_event("s2", 1)))  # another session's seq 1
    assert look(store, lambda r: r.events("s1")) == [an_event("s1", 1)]


def test_put_with_the_current_version_succeeds(store: Store) -> None:
    write(store, lambda tx: tx.put_session(a_session(), expected_version=None))
    v2 = a_session(status=SessionStatus.IDLE, version=2)
    write(store, lambda tx: tx.put_session(v2, expected_version=1))
    assert look(store, lambda r: r.get_session("s1")) == v2


@pytest.mark.parametrize("expected", [0, 2, 5])
def test_put_with_a_stale_version_conflicts(store: Store, expected: int) -> None:
    write(store, lambda tx: tx.put_session(a_session(), expected_version=None))
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_session(a_session(version=9), expected_version=expected))
    assert look(store, lambda r: r.get_session("s1")) == a_session()


def test_update_of_a_missing_record_conflicts(store: Store) -> None:
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_session(a_session(version=2), expected_version=1))
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_tool_task(a_task(version=2), expected_version=1))
    assert look(store, lambda r: r.get_session("s1")) is None


def test_version_checks_apply_to_every_versioned_record(store: Store) -> None:
    sub = a_submission()
    task = a_task()
    write(store, lambda tx: tx.put_submission(sub, expected_version=None))
    write(store, lambda tx: tx.put_tool_task(task, expected_version=None))
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_submission(sub, expected_version=3))
    with pytest.raises(ConflictError):
        write(store, lambda tx: tx.put_tool_task(task, expected_version=3))


# -- transactions ----------------------------------------------------------------------------


def test_reads_see_the_transactions_own_writes(store: Store) -> None:
    def body(tx: Tx) -> tuple[Any, ...]:
        tx.put_session(a_session(), expected_version=None)
        tx.put_submission(a_submission(), expected_version=None)
        tx.append_event(an_event())
        return (
            tx.get_session("s1"),
            tx.get_submission("s1-sub1"),
            tx.get_submission_by_request("s1-req1"),
            list(tx.unsettled_submissions("s1")),
            list(tx.events("s1")),
            [s.id for s in tx.active_sessions()],
        )

    session, sub, by_request, unsettled, events, active = write(store, body)  # type: ignore[misc]
    assert session == a_session()
    assert sub == by_request == a_submission()
    assert unsettled == [a_submission()]
    assert events == [an_event()]
    assert active == ["s1"]


def test_a_failing_body_rolls_everything_back(store: Store) -> None:
    write(store, lambda tx: tx.put_session(a_session(), expected_version=None))

    def body(tx: Tx) -> None:
        tx.put_session(a_session(status=SessionStatus.IDLE, version=2), expected_version=1)
        tx.put_submission(a_submission(), expected_version=None)
        tx.append_event(an_event())
        tx.put_tool_task(a_task(), expected_version=None)
        raise Boom("after the writes")

    with pytest.raises(Boom):
        write(store, body)

    assert look(store, lambda r: r.get_session("s1")) == a_session()
    assert look(store, lambda r: r.submissions("s1")) == []
    assert look(store, lambda r: r.events("s1")) == []
    assert look(store, lambda r: r.get_tool_task(a_task().id)) is None
    # The store is usable afterwards.
    write(store, lambda tx: tx.append_event(an_event()))


def test_a_conflict_rolls_back_the_earlier_writes_of_the_body(store: Store) -> None:
    write(store, lambda tx: tx.append_event(an_event("s1", 1)))

    def body(tx: Tx) -> None:
        tx.put_session(a_session(), expected_version=None)
        tx.append_event(an_event("s1", 1))  # conflicts

    with pytest.raises(ConflictError):
        write(store, body)
    assert look(store, lambda r: r.get_session("s1")) is None


def test_transact_returns_the_body_result(store: Store) -> None:
    assert write(store, lambda tx: 42) == 42
    assert look(store, lambda r: "read") == "read"


def test_base_exceptions_roll_back_too(store: Store) -> None:
    """A Suspend/KeyboardInterrupt inside a body must not leave a half-written record."""

    def body(tx: Tx) -> None:
        tx.put_session(a_session(), expected_version=None)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write(store, body)
    assert look(store, lambda r: r.get_session("s1")) is None


# -- queries ---------------------------------------------------------------------------------


def test_events_paginate_by_cursor(store: Store) -> None:
    def body(tx: Tx) -> None:
        for seq in (3, 1, 5, 2, 4, 6, 7):  # insertion order must not matter
            tx.append_event(an_event("s1", seq))
        tx.append_event(an_event("s2", 1))

    write(store, body)

    assert [e.seq for e in look(store, lambda r: r.events("s1"))] == [1, 2, 3, 4, 5, 6, 7]
    assert [e.seq for e in look(store, lambda r: r.events("s1", after=3))] == [4, 5, 6, 7]
    assert [e.seq for e in look(store, lambda r: r.events("s1", after=0, limit=3))] == [1, 2, 3]
    assert [e.seq for e in look(store, lambda r: r.events("s1", after=5, limit=3))] == [6, 7]
    assert look(store, lambda r: r.events("s1", after=7)) == []
    assert look(store, lambda r: r.events("s1", limit=0)) == []

    cursor, pages = 0, []
    while page := look(store, lambda r, c=cursor: r.events("s1", after=c, limit=2)):
        pages.append([e.seq for e in page])
        cursor = page[-1].seq
    assert pages == [[1, 2], [3, 4], [5, 6], [7]]


def _message(sid: str, seq: int) -> MessageRecord:
    return MessageRecord(session_id=sid, seq=seq, turn_id="t1", role="user", text=f"m{seq}")


def test_messages_read_past_a_cursor(store: Store) -> None:
    def body(tx: Tx) -> None:
        for seq in (3, 1, 5, 2, 4):  # insertion order must not matter
            tx.append_message(_message("s1", seq))
        tx.append_message(_message("s2", 9))

    write(store, body)

    assert [m.seq for m in look(store, lambda r: r.messages("s1"))] == [1, 2, 3, 4, 5]
    assert [m.seq for m in look(store, lambda r: r.messages("s1", after=3))] == [4, 5]
    assert look(store, lambda r: r.messages("s1", after=5)) == []

    def own_writes(tx: Tx) -> list[int]:
        tx.append_message(_message("s1", 6))
        return [m.seq for m in tx.messages("s1", after=4)]

    assert write(store, own_writes) == [5, 6]


def test_unsettled_submissions_in_admission_order(store: Store) -> None:
    statuses = {
        1: SubmissionStatus.COMPLETED,
        2: SubmissionStatus.RUNNING,
        3: SubmissionStatus.ABORTED,
        4: SubmissionStatus.QUEUED,
        5: SubmissionStatus.FAILED,
        6: SubmissionStatus.QUEUED,
    }

    def body(tx: Tx) -> None:
        for seq in (6, 4, 1, 5, 3, 2):  # ids sort differently from seq on purpose
            tx.put_submission(
                a_submission(seq=seq, id=f"z{10 - seq}", status=statuses[seq]),
                expected_version=None,
            )
        tx.put_submission(a_submission("s2", 1), expected_version=None)

    write(store, body)

    unsettled = look(store, lambda r: r.unsettled_submissions("s1"))
    assert [s.seq for s in unsettled] == [2, 4, 6]
    assert [s.seq for s in look(store, lambda r: r.submissions("s1"))] == [1, 2, 3, 4, 5, 6]


def test_unsettled_follows_status_updates(store: Store) -> None:
    sub = a_submission()
    write(store, lambda tx: tx.put_submission(sub, expected_version=None))
    done = a_submission(status=SubmissionStatus.COMPLETED, version=2)
    write(store, lambda tx: tx.put_submission(done, expected_version=1))
    assert look(store, lambda r: r.unsettled_submissions("s1")) == []
    assert look(store, lambda r: r.get_submission_by_request("s1-req1")) == done


def test_active_sessions(store: Store) -> None:
    def body(tx: Tx) -> None:
        tx.put_session(a_session("b"), expected_version=None)
        tx.put_session(a_session("a", status=SessionStatus.IDLE), expected_version=None)
        tx.put_session(a_session("c"), expected_version=None)

    write(store, body)
    assert sorted(s.id for s in look(store, lambda r: r.active_sessions())) == ["b", "c"]
    assert sorted(s.id for s in look(store, lambda r: r.list_sessions())) == ["a", "b", "c"]

    write(
        store,
        lambda tx: tx.put_session(
            a_session("b", status=SessionStatus.IDLE, version=2), expected_version=1
        ),
    )
    assert [s.id for s in look(store, lambda r: r.active_sessions())] == ["c"]


def test_tool_tasks_ordered_by_position(store: Store) -> None:
    def body(tx: Tx) -> None:
        for round_, index in ((1, 0), (0, 2), (0, 0), (1, 1), (0, 1)):
            tx.put_tool_task(a_task("t1", round_, index), expected_version=None)
        tx.put_tool_task(a_task("t2", 0, 0), expected_version=None)

    write(store, body)
    got = look(store, lambda r: r.tool_tasks("t1"))
    assert [(t.round, t.index) for t in got] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert len(look(store, lambda r: r.session_tool_tasks("s1"))) == 6


def test_model_calls_and_attempts_ordered(store: Store) -> None:
    def body(tx: Tx) -> None:
        for round_ in (2, 0, 1):
            tx.insert_model_call(
                ModelCallRecord(
                    turn_id="t1",
                    round=round_,
                    status=ModelCallStatus.COMPLETED,
                    text=str(round_),
                    created_at=1.0,
                )
            )
        for number in (3, 1, 2):
            tx.put_attempt(
                AttemptRecord(
                    submission_id="sub",
                    number=number,
                    status=AttemptStatus.RUNNING,
                    worker="w",
                    started_at=1.0,
                ),
                expected_version=None,
            )

    write(store, body)
    assert [c.round for c in look(store, lambda r: r.model_calls("t1"))] == [0, 1, 2]
    assert look(store, lambda r: r.get_model_call("t1", 1)).text == "1"
    assert look(store, lambda r: r.get_model_call("t1", 9)) is None
    assert [a.number for a in look(store, lambda r: r.attempts("sub"))] == [1, 2, 3]


def test_missing_records_read_as_none_or_empty(store: Store) -> None:
    assert look(store, lambda r: r.get_session("x")) is None
    assert look(store, lambda r: r.get_submission("x")) is None
    assert look(store, lambda r: r.get_submission_by_request("x")) is None
    assert look(store, lambda r: r.get_turn("x")) is None
    assert look(store, lambda r: r.get_tool_task("x")) is None
    assert look(store, lambda r: list(r.messages("x"))) == []
    assert look(store, lambda r: list(r.submissions("x"))) == []


# -- exact round trips -----------------------------------------------------------------------

CALLS = (
    ToolCallRequest(name="read_file", arguments='{\n  "path": "é.txt"\n}', provider_id="c1"),
    ToolCallRequest(name="shell", arguments="{}", provider_id=None),
)


def test_records_round_trip_exactly(store: Store) -> None:
    session = a_session(
        lease=Lease(owner="lease-9", token=4, expires_at=99.5, host="h", pid=7),
        owner="alice",
        steering=("make it blue ✓", "and fast"),
        next_event_seq=3,
        next_message_seq=2,
        next_submission_seq=5,
    )
    sub = a_submission(
        status=SubmissionStatus.FAILED,
        attempts=2,
        interruptions=1,
        abort_requested=True,
        cursor=17,
        error=ErrorInfo(code="c", message="m ✓", unknown_calls=("a", "b")),
        started_at=2.0,
        settled_at=3.5,
    )
    attempt = AttemptRecord(
        submission_id=sub.id,
        number=1,
        status=AttemptStatus.YIELDED,
        worker="w",
        started_at=1.0,
        ended_at=2.0,
        reason="deadline",
    )
    turn = TurnRecord(
        id="t1",
        session_id="s1",
        submission_id=sub.id,
        status=TurnStatus.FAILED,
        rounds=2,
        final_text=None,
    )
    call = ModelCallRecord(
        turn_id="t1",
        round=0,
        status=ModelCallStatus.COMPLETED,
        text="two calls",
        tool_calls=CALLS,
        usage=Usage(input_tokens=11, output_tokens=22),
        stop_reason="tool_calls",
        stop_inferred=True,
        truncated=False,
        created_at=4.0,
    )
    task = a_task(provider_id="c1", status=ToolTaskStatus.OUTCOME_UNKNOWN, runs=3, result="unknown")
    message = MessageRecord(
        session_id="s1", seq=1, turn_id="t1", role="assistant", text="hi", round=0, tool_calls=CALLS
    )
    event = EventRecord(
        session_id="s1",
        seq=1,
        type="x",
        turn_id="t1",
        data={"list": [1, "two", None], "obj": {"k": False}, "f": 1.5},
        at=5.0,
    )

    def body(tx: Tx) -> None:
        tx.put_session(session, expected_version=None)
        tx.put_submission(sub, expected_version=None)
        tx.put_attempt(attempt, expected_version=None)
        tx.put_turn(turn, expected_version=None)
        tx.insert_model_call(call)
        tx.put_tool_task(task, expected_version=None)
        tx.append_message(message)
        tx.append_event(event)

    write(store, body)

    assert look(store, lambda r: r.get_session("s1")) == session
    assert look(store, lambda r: r.get_submission(sub.id)) == sub
    assert look(store, lambda r: list(r.attempts(sub.id))) == [attempt]
    assert look(store, lambda r: r.get_turn("t1")) == turn
    assert look(store, lambda r: r.get_model_call("t1", 0)) == call
    assert look(store, lambda r: r.get_tool_task(task.id)) == task
    assert look(store, lambda r: list(r.messages("s1"))) == [message]
    assert look(store, lambda r: list(r.events("s1"))) == [event]
    back = look(store, lambda r: r.get_model_call("t1", 0))
    assert isinstance(back.tool_calls, tuple) and isinstance(back.tool_calls[0], ToolCallRequest)
    assert isinstance(back.usage, Usage)
    assert isinstance(look(store, lambda r: r.get_session("s1")).lease, Lease)


# -- SQLite specifics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgres://localhost/db",
        "sqlite:",
        "sqlite://",
        "sqlite:///",
        "sqlite3:///x.db",
        "x.db",
    ],
)
def test_sqlite_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"sqlite:///"):
        SqliteStore(url)


def _must_refuse(url: str) -> ConfigurationError:
    try:
        store = SqliteStore(url)
    except ConfigurationError as exc:
        return exc
    store.close()
    pytest.fail(f"SqliteStore accepted {url!r}")


def test_sqlite_rejects_a_host(tmp_path: Path) -> None:
    """``sqlite://host/x.db`` names a host a file store cannot have; it must not be ignored."""
    _must_refuse(f"sqlite://somehost/{tmp_path}/x.db")


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ("synchronus=FULL", "synchronus"),
        ("journal_mode=DELETE", "journal_mode"),
        ("synchronous=OFF", "synchronous"),
        ("synchronous=sometimes", "synchronous"),
        ("busy_timeout_ms=soon", "busy_timeout_ms"),
    ],
)
def test_sqlite_rejects_bad_options(tmp_path: Path, query: str, mentions: str) -> None:
    with pytest.raises(ConfigurationError, match=mentions):
        SqliteStore(f"sqlite:///{tmp_path}/x.db?{query}")


@pytest.mark.parametrize("query", ["synchronus", "synchronus="])
def test_sqlite_rejects_options_without_values(tmp_path: Path, query: str) -> None:
    """A typo'd option with no value is still a typo: it must not be dropped silently."""
    _must_refuse(f"sqlite:///{tmp_path}/x.db?{query}")


def _pragma(path: Path, name: str) -> Any:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def _store_pragma(store: SqliteStore, name: str) -> Any:
    # synchronous and busy_timeout are per connection: ask the store's own connection.
    return store._conn().execute(f"PRAGMA {name}").fetchone()[0]


def test_sqlite_defaults_to_wal_and_full_sync(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/x.db")
    try:
        assert _pragma(tmp_path / "x.db", "journal_mode") == "wal"  # persistent in the file
        assert _store_pragma(store, "synchronous") == 2  # FULL
        assert _store_pragma(store, "busy_timeout") == 10_000
    finally:
        store.close()


@pytest.mark.parametrize("value", ["NORMAL", "normal"])
def test_sqlite_synchronous_normal_is_accepted(tmp_path: Path, value: str) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/x.db?synchronous={value}&busy_timeout_ms=250")
    try:
        assert _store_pragma(store, "synchronous") == 1  # NORMAL
        assert _store_pragma(store, "busy_timeout") == 250
        assert _pragma(tmp_path / "x.db", "journal_mode") == "wal"
    finally:
        store.close()


def test_sqlite_relative_url_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqliteStore("sqlite:///sub/dir/rel.db")
    store.close()
    assert (tmp_path / "sub" / "dir" / "rel.db").exists()


def test_sqlite_migrates_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    first = SqliteStore(url)
    first.transact(lambda tx: tx.put_session(a_session(), expected_version=None))
    second = SqliteStore(url)
    try:
        conn = sqlite3.connect(tmp_path / "x.db")
        try:
            versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
        finally:
            conn.close()
        assert versions == list(range(1, len(versions) + 1))
        assert len(versions) == len(set(versions)) >= 1
        # Both handles see the same data; the second open did not recreate anything.
        assert second.read(lambda r: r.get_session("s1")) == a_session()
    finally:
        first.close()
        second.close()


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    SqliteStore(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version (version) VALUES (999)")
    conn.commit()
    conn.close()
    with pytest.raises(Exception, match="upgrade fxdurable"):
        SqliteStore(f"sqlite:///{path}")


def test_open_store_picks_sqlite(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    try:
        assert isinstance(store, SqliteStore)
        assert store.url == f"sqlite:///{tmp_path}/x.db"
    finally:
        store.close()


@pytest.mark.parametrize("url", ["mysql://x", "dynamo://table"])
def test_open_store_explains_unsupported_urls(url: str) -> None:
    with pytest.raises(ConfigurationError, match="sqlite:///"):
        open_store(url)


def test_two_handles_on_one_file_serialise_writers(tmp_path: Path) -> None:
    """A conditional write through one handle sees a commit made through another."""
    url = f"sqlite:///{tmp_path}/x.db"
    a, b = SqliteStore(url), SqliteStore(url)
    try:
        a.transact(lambda tx: tx.put_session(a_session(), expected_version=None))
        b.transact(lambda tx: tx.put_session(a_session(version=2), expected_version=1))
        with pytest.raises(ConflictError):
            a.transact(lambda tx: tx.put_session(a_session(version=2), expected_version=1))
    finally:
        a.close()
        b.close()


def test_tool_tasks_of_one_round(store: Store) -> None:
    """The turn loop reads only the current round's tasks, so a step stays O(1) in a long turn."""

    def body(tx: Tx) -> None:
        for round_ in range(3):
            for index in (1, 0):
                tx.put_tool_task(a_task("t1", round_, index), expected_version=None)

    write(store, body)
    got = look(store, lambda r: r.tool_tasks("t1", 1))
    assert [(t.round, t.index) for t in got] == [(1, 0), (1, 1)]
    assert look(store, lambda r: r.tool_tasks("t1", 7)) == []


def test_steering_flows_through_the_journal_on_every_backend(store: Store) -> None:
    """Steer, deliver with a model call, complete: the session's steering field round-trips
    through each backend's transactions."""
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal, WorkerIdentity

    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go", owner="alice").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    assert journal.steer("s1", "left", owner="alice").steered
    assert journal.steer("s1", "then right").steered
    journal.record_model_call(
        fence, sub.id, round_=0, text="ok", tool_calls=(), policies=(), usage=Usage(), steering=2
    )
    journal.settle(fence, sub.id, "completed", text="ok")
    session = store.read(lambda v: v.get_session("s1"))
    assert session is not None and session.owner == "alice" and session.steering == ()
    texts = [(m.role, m.text) for m in store.read(lambda v: v.messages("s1"))]
    assert texts == [("user", "go"), ("user", "left"), ("user", "then right"), ("assistant", "ok")]


def _one_pending_call(
    store: Store, tool: str, arguments: str
) -> tuple[Journal, Fence, ToolTaskRecord]:
    """Through the journal: session s1's turn, whose first model call asked for one unsafe
    ``tool`` call, still pending. Returns the journal, the worker's fence and the call."""
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal, WorkerIdentity
    from fxdurable.core.records import ToolCallRequest

    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    call = ToolCallRequest(name=tool, arguments=arguments)
    (task,) = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=[call], policies=["unsafe"], usage=Usage()
    )
    return journal, fence, task


def test_durable_tool_steps_flow_through_the_journal_on_every_backend(store: Store) -> None:
    """A durable call's steps (new optional fields of the tool task) round-trip through each
    backend's transactions, in the order they were recorded, with their events."""
    journal, fence, task = _one_pending_call(store, "provision", "{}")
    journal.start_tool(fence, task.id, durable=True)
    journal.record_step(fence, task.id, name="tenant", value='{"id":"t-1"}')
    journal.record_step(fence, task.id, name="dns", value='"a.example.com"')
    got = store.read(lambda v: v.get_tool_task(task.id))
    assert got is not None and got.durable and got.status == ToolTaskStatus.RUNNING
    assert [(s.name, s.value, s.run) for s in got.steps] == [
        ("tenant", '{"id":"t-1"}', 1),
        ("dns", '"a.example.com"', 1),
    ]
    events = store.read(lambda v: v.events("s1"))
    assert [e.data["step"] for e in events if e.type == "tool.step"] == ["tenant", "dns"]


def test_questions_and_answers_flow_through_the_journal_on_every_backend(store: Store) -> None:
    """A question (new optional fields of the submission and the tool task) round-trips
    through each backend's transactions: the waiting submission stays unsettled and is not
    work a release reports, the answer (a rewrite) lands on the call, and the events say so."""
    from fxdurable.core.asking import waits_for_input

    journal, fence, task = _one_pending_call(store, "deploy", '{"version": "1"}')
    journal.request_input(fence, task.turn_id, question="May I?", about="tool", task_id=task.id)
    assert journal.release(fence) is False
    (waiting,) = store.read(lambda v: v.unsettled_submissions("s1"))
    assert waits_for_input(waiting) and waiting.input_request is not None
    assert (waiting.input_request.question, waiting.input_request.task_id) == ("May I?", task.id)
    journal.answer_input("s1", "rewrite", arguments='{"version": "2"}', task_id=task.id)
    (answered,) = store.read(lambda v: v.unsettled_submissions("s1"))
    assert not waits_for_input(answered)
    got = store.read(lambda v: v.get_tool_task(task.id))
    assert got is not None and got.answer is not None
    assert (got.answer.kind, got.arguments) == ("rewrite", '{"version": "2"}')
    types = [e.type for e in store.read(lambda v: v.events("s1"))]
    assert types[-3:] == ["attempt.yielded", "input.requested", "input.answered"]


def test_persisted_state_flows_through_the_journal_on_every_backend(store: Store) -> None:
    """``ctx.state`` (a new optional field of the session record, and ``state.changed``
    events): committed with a durable step and with a result, merged per key, copied by a fork
    as of its point, and a state near its bound (64 KB) round-trips on every backend."""
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal, WorkerIdentity
    from fxdurable.core.records import ToolCallRequest
    from fxdurable.core.session_state import MAX_STATE_BYTES, StateWrites
    from fxdurable.testing.invariants import check_store

    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    calls = [ToolCallRequest(name="onboard", arguments="{}")] * 2
    (first, second) = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=calls, policies=["unsafe"] * 2, usage=Usage()
    )
    journal.start_tool(fence, first.id, durable=True)
    journal.record_step(
        fence, first.id, name="tenant", value='"t-1"', writes=StateWrites(set={"tenant": "t-1"})
    )
    journal.finish_tool(
        fence, first.id, ToolTaskStatus.COMPLETED, "ok", writes=StateWrites(set={"ready": True})
    )
    after_first = store.read(lambda v: v.get_session("s1")).next_event_seq - 1
    big = "x" * (MAX_STATE_BYTES - 200)  # the state stays just under its bound
    journal.start_tool(fence, second.id)
    journal.finish_tool(
        fence,
        second.id,
        ToolTaskStatus.COMPLETED,
        "ok",
        writes=StateWrites(
            set={"notes": big, "nested": {"a": [1, 2.5, None]}}, deleted=("tenant",)
        ),
    )
    session = store.read(lambda v: v.get_session("s1"))
    assert session is not None
    assert dict(session.state) == {"ready": True, "notes": big, "nested": {"a": [1, 2.5, None]}}
    events = store.read(lambda v: v.events("s1"))
    changes = [
        (sorted(e.data["set"]), e.data["deleted"]) for e in events if e.type == "state.changed"
    ]
    assert changes == [(["tenant"], []), (["ready"], []), (["nested", "notes"], ["tenant"])]
    fork = journal.fork("s1", "s2", after=after_first)
    forked = store.read(lambda v: v.get_session("s2"))
    assert fork.created and forked is not None
    assert dict(forked.state) == {"tenant": "t-1", "ready": True}
    assert store.read(lambda v: check_store(v, now=time.time())).violations == ()


def test_sqlite_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Workers started together all create the store: switching a new file to WAL makes SQLite
    answer "database is locked" at once to all but one opener, which must retry, not fail."""
    import subprocess
    import sys

    opener = (
        "import sys, time\n"
        "from fxdurable.stores.sqlite import SqliteStore\n"
        "while time.time() < float(sys.argv[2]): pass\n"  # start together
        "SqliteStore(sys.argv[1]).close()\n"
    )
    for attempt in range(4):
        url = f"sqlite:///{tmp_path}/race{attempt}.db"
        start_at = f"{time.time() + 1.0:.3f}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", opener, url, start_at],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err


# -- forks on every backend (Journal.fork: reads of the source, writes of a new session) ----


def _run_turn(journal: Any, prompt: str, *, tool: bool) -> str:
    """One turn through the journal as a worker drives it: optionally a tool round, then an
    answer; returns the submission id."""
    from fxdurable.core.journal import WorkerIdentity

    sub = journal.admit("s1", agent="a", prompt=prompt).submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    start = journal.begin_attempt(fence, sub.id, worker="w")
    usage = Usage(input_tokens=1, output_tokens=1)
    round_ = 0
    if tool:
        call = ToolCallRequest(name="look", arguments="{}", provider_id=None)
        (task,) = journal.record_model_call(
            fence, start.turn.id, round_=0, text="looking", tool_calls=[call],
            policies=["unsafe"], usage=usage,
        )  # fmt: skip
        journal.start_tool(fence, task.id)
        journal.finish_tool(fence, task.id, ToolTaskStatus.COMPLETED, "seen")
        round_ = 1
    journal.record_model_call(
        fence, start.turn.id, round_=round_, text=f"ok: {prompt}", tool_calls=[], policies=[],
        usage=usage,
    )  # fmt: skip
    journal.settle(fence, sub.id, "completed", text=f"ok: {prompt}")
    journal.release(fence)
    return str(sub.id)


def test_a_fork_is_one_transaction_of_copies_on_every_store(store: Store) -> None:
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal
    from fxdurable.errors import SessionExistsError
    from fxdurable.testing.invariants import check_store

    journal = Journal(store, SystemClock(), RandomIds())
    first = _run_turn(journal, "my name is Ada", tool=True)
    _run_turn(journal, "I like tea", tool=False)
    fork = journal.fork("s1", "s2", after=first)
    assert (fork.created, fork.messages, fork.agent) == (True, 3, "a")
    assert journal.fork("s1", "s2", after=first).created is False
    with pytest.raises(SessionExistsError):
        journal.fork("s1", "s2")

    def copies(view: ReadView) -> tuple[Any, ...]:
        return (
            view.get_session("s2"),
            [(m.role, m.text) for m in view.messages("s2")],
            view.session_tool_tasks("s2"),
            view.events("s2"),
        )

    session, messages, tasks, events = store.read(copies)
    assert session.status == SessionStatus.IDLE and session.next_message_seq == 4
    assert messages == [
        ("user", "my name is Ada"),
        ("assistant", "looking"),
        ("assistant", "ok: my name is Ada"),
    ]
    assert [(t.status, t.result, t.session_id) for t in tasks] == [
        (ToolTaskStatus.COMPLETED, "seen", "s2")
    ]
    assert [e.type for e in events] == ["session.created"]
    assert store.read(lambda v: check_store(v, now=time.time(), at_rest=True)).violations == ()
    # The fork takes a next message of its own.
    second = journal.admit("s2", agent="a", prompt="what is my name?").submission
    assert second.session_id == "s2" and second.seq == 1


# -- subagents on every backend (Journal.admit_child: two sessions in one transaction) -----


def test_a_subagent_admission_links_parent_and_child_in_one_transaction_on_every_store(
    store: Store,
) -> None:
    """The child session, its submission and the parent call's ``child_session`` (new
    optional fields of the session and the tool task) are written in the parent's fenced
    transaction on each backend; a repeat finds the same submission and writes nothing; a
    stale parent fence writes nothing at all."""
    from fxdurable.core.clock import RandomIds, SystemClock
    from fxdurable.core.journal import Journal, WorkerIdentity
    from fxdurable.core.records import ToolCallRequest
    from fxdurable.core.subagent import child_request_id, child_session_id
    from fxdurable.errors import LeaseLostError
    from fxdurable.testing import check_store

    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("alice/p1", agent="lead", prompt="go", owner="alice").submission
    fence = journal.claim("alice/p1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    call = ToolCallRequest(name="research", arguments='{"task": "dig"}')
    (task,) = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=[call], policies=["idempotent"], usage=Usage()
    )
    journal.start_tool(fence, task.id)
    first = journal.admit_child(fence, task.id, agent="researcher", prompt="dig")
    again = journal.admit_child(fence, task.id, agent="researcher", prompt="dig")
    child_id = child_session_id("alice/p1", task.execution_id)
    assert (first.created, again.created, again.submission) == (True, False, first.submission)
    assert first.submission.session_id == child_id and child_id.startswith("alice/sub-x")
    assert first.submission.request_id == child_request_id(task.execution_id)
    child = store.read(lambda v: v.get_session(child_id))
    assert child is not None
    assert (child.owner, child.agent, child.parent_session, child.parent_task) == (
        "alice",
        "researcher",
        "alice/p1",
        task.id,
    )
    linked = store.read(lambda v: v.get_tool_task(task.id))
    assert linked is not None and linked.child_session == child_id
    [created, admitted] = store.read(lambda v: v.events(child_id))
    assert created.data["parent_task"] == task.id and admitted.type == "submission.admitted"
    assert store.read(lambda v: check_store(v, now=0.0)).violations == ()

    journal.heartbeat(fence, ttl_s=-1)  # the lease expires and another worker takes it over
    stale = journal.claim("alice/p1", WorkerIdentity("h2", 2), ttl_s=30)
    assert stale is not None and stale.token > fence.token
    before = store.read(lambda v: len(v.list_sessions()))
    with pytest.raises(LeaseLostError):
        journal.admit_child(fence, task.id, agent="researcher", prompt="dig")
    assert store.read(lambda v: len(v.list_sessions())) == before
