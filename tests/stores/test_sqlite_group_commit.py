"""SQLite group commit (fxdurable.stores._group_commit): transactions of several threads that
queue while another commits share one COMMIT (one fsync), each still isolated: one that fails
is undone alone, and none returns before its group has committed.

Counted, not timed: the COMMITs the store's connections run (SQLite's trace callback)."""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from fxdurable.core.records import SessionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import Tx
from fxdurable.errors import ConflictError
from fxdurable.stores.sqlite import SqliteStore

WAIT_S = 10.0


def _session(session_id: str, version: int = 1) -> SessionRecord:
    return SessionRecord(
        id=session_id, agent="a", status=SessionStatus.IDLE, created_at=1.0, version=version
    )


def _put(session_id: str) -> Callable[[Tx], object]:
    """A body writing a new session ``session_id``."""

    def body(tx: Tx) -> object:
        tx.put_session(_session(session_id), expected_version=None)
        return None

    return body


def _counted_store(path: Path, statements: Counter[str]) -> SqliteStore:
    store = SqliteStore(f"sqlite:///{path}")
    opened = store._open_connection

    def traced() -> sqlite3.Connection:
        conn = opened()
        conn.set_trace_callback(lambda sql: statements.update([sql.split(None, 1)[0].upper()]))
        return conn

    store._open_connection = traced  # type: ignore[method-assign]
    return store


@dataclass
class Counted:
    store: SqliteStore
    statements: Counter[str]


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[Counted]:
    """A store whose connections (each thread's, opened from now on) count their SQL."""
    statements: Counter[str] = Counter()
    store = _counted_store(tmp_path / "s.db", statements)
    yield Counted(store, statements)
    store.close()


def _grouped(store: SqliteStore, bodies: list[Callable[[Tx], object]]) -> list[Future[object]]:
    """Run the first body alone, held open until the others have queued behind its commit;
    they then run as one group. Returns each body's future, in order."""
    running, release = threading.Event(), threading.Event()

    def first(tx: Tx) -> object:
        running.set()
        assert release.wait(WAIT_S)
        return bodies[0](tx)

    pool = ThreadPoolExecutor(len(bodies))
    futures = [pool.submit(store.transact, first)]
    assert running.wait(WAIT_S)  # the first leads, alone in its group...
    for body in bodies[1:]:
        futures.append(pool.submit(store.transact, body))
    assert store._group.wait_queued(len(bodies) - 1, WAIT_S)  # ...and the rest wait behind it
    release.set()
    pool.shutdown(wait=True)
    return futures


def test_transactions_queued_behind_a_commit_share_the_next_one(counted: Counted) -> None:
    store, statements = counted.store, counted.statements
    ids = [f"s{i}" for i in range(4)]
    bodies: list[Callable[[Tx], object]] = [_put(sid) for sid in ids]
    statements.clear()
    for future in _grouped(store, bodies):
        future.result()
    # The first commits alone; the three that queued meanwhile commit once, together.
    assert statements["COMMIT"] == 2, dict(statements)
    assert statements["SAVEPOINT"] == 3, dict(statements)
    assert [s.id for s in store.read(lambda v: v.list_sessions())] == ids


def test_a_transaction_alone_runs_without_a_savepoint(counted: Counted) -> None:
    store, statements = counted.store, counted.statements
    with ThreadPoolExecutor(1) as pool:  # a thread of its own: a traced connection
        put = pool.submit(
            store.transact, lambda tx: tx.put_session(_session("s"), expected_version=None)
        )
        put.result()
    del statements["PRAGMA"]  # the connection's own settings, at its open
    assert statements == {"BEGIN": 1, "INSERT": 1, "COMMIT": 1}


def test_a_failing_transaction_in_a_group_is_undone_alone(counted: Counted) -> None:
    store, statements = counted.store, counted.statements
    store.transact(lambda tx: tx.put_session(_session("taken"), expected_version=None))

    def stale(tx: Tx) -> None:
        tx.put_session(_session("stale-write"), expected_version=None)
        # A second writer's version race lost: expected 5, the row is at 1.
        tx.put_session(_session("taken", version=6), expected_version=5)

    bodies: list[Callable[[Tx], object]] = [
        _put("first"),
        _put("before"),
        stale,
        _put("after"),
    ]
    statements.clear()
    futures = _grouped(store, bodies)
    with pytest.raises(ConflictError):
        futures[2].result()
    for i in (0, 1, 3):
        futures[i].result()
    assert statements["COMMIT"] == 2, dict(statements)
    kept = {s.id for s in store.read(lambda v: v.list_sessions())}
    assert kept == {"taken", "first", "before", "after"}


def test_a_failed_group_commit_fails_every_transaction_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        commits = 0
        real_commit = store._commit

        def commit(conn: sqlite3.Connection) -> None:
            nonlocal commits
            commits += 1
            if commits == 2:  # the group's
                raise RuntimeError("the commit failed")
            real_commit(conn)

        monkeypatch.setattr(store, "_commit", commit)
        bodies: list[Callable[[Tx], object]] = [_put(sid) for sid in ("first", "g1", "g2")]
        futures = _grouped(store, bodies)
        futures[0].result()
        for future in futures[1:]:
            with pytest.raises(RuntimeError, match="the commit failed"):
                future.result()
        assert [s.id for s in store.read(lambda v: v.list_sessions())] == ["first"]
    finally:
        store.close()


def test_a_transaction_started_inside_a_transaction_body_is_refused(tmp_path: Path) -> None:
    """Not a wait for ever: the inner one would queue behind the group its own thread runs."""
    store = SqliteStore(f"sqlite:///{tmp_path / 'n.db'}")

    def nested(tx: Tx) -> object:
        return store.transact(_put("inner"))

    pool = ThreadPoolExecutor(1)
    outer = pool.submit(store.transact, nested)
    try:
        with pytest.raises(RuntimeError, match="cannot start a transaction of its own"):
            outer.result(timeout=WAIT_S)
        assert store.read(lambda v: v.list_sessions()) == []
        store.transact(_put("after"))  # the store is not left locked
    finally:
        pool.shutdown(wait=False)
        if outer.done():  # else close() would wait for ever on the stuck transaction
            store.close()
