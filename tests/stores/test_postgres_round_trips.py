"""The Postgres store's round trips, counted from libpq's own trace of the wire: each Sync
or Flush (the end of a batch of extended-protocol messages whose answers the client then
waits for) and each simple Query is one round trip. Pipelining (stores/postgres.py) sends
a transaction's statements without waiting: a write-only transaction is two round trips (its
statements, then COMMIT), one that reads first is three, and a read of two records is three
(before: one per statement, BEGIN and the end included).

And the statements it prepares stay prepared on the server as psycopg believes, through a
pipeline that an error aborted (psycopg's automatic preparation lost that track: the next
use failed with "prepared statement does not exist")."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from fxdurable.backends import open_store
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import ConflictError
from fxdurable.stores.postgres import PostgresStore
from fxdurable.testing.store_contract.builders import a_session, an_event

_CLIENT = re.compile(r"^F\t\d+\t(\w+)", re.MULTILINE)


def _waits(trace: str) -> int:
    """Round trips in a trace: each Query the client sent, and each Sync or Flush that ends a
    run of statements. A Flush right after a Sync or a Flush is the same wait: psycopg flushes
    again while it still waits for the same answers, as often as they come in pieces (a count
    of the machine's load, not of the protocol)."""
    count, previous = 0, ""
    for message in _CLIENT.findall(trace):
        if message == "Query" or (
            message in ("Sync", "Flush") and previous not in ("Sync", "Flush")
        ):
            count += 1
        previous = message
    return count


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    # One connection, so that the one traced carries every transaction.
    s = open_store(f"{postgres_url}&pool_min=1&pool_max=1")
    assert isinstance(s, PostgresStore)
    yield s
    s.close()


class _Wire:
    """libpq's trace of the store's one connection, over one call at a time."""

    def __init__(self, store: PostgresStore, path: Path) -> None:
        self._store = store
        self._path = path
        self.trace = ""

    def round_trips(self, run: Callable[[], Any]) -> int:
        with self._path.open("w") as f:
            with self._store._pool.connection() as conn:  # the pool's one connection
                conn.pgconn.trace(f.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                run()
            finally:
                with self._store._pool.connection() as conn:
                    conn.pgconn.untrace()  # flushes libpq's own buffer of the trace
        self.trace = self._path.read_text()
        return _waits(self.trace)


@pytest.fixture
def wire(store: PostgresStore, tmp_path: Path) -> _Wire:
    return _Wire(store, tmp_path / "libpq.trace")


def _counted(wire: _Wire, run: Callable[[], Any]) -> int:
    run()  # once first: every statement prepared, as a running store's are
    return wire.round_trips(run)


def test_a_write_only_transaction_is_two_round_trips(store: PostgresStore, wire: _Wire) -> None:
    session = a_session("s1")
    store.transact(lambda tx: tx.put_session(session, expected_version=None))
    held = [session]

    def write() -> None:
        def body(tx: Tx) -> None:
            current = held[0]
            newer = dataclasses.replace(current, version=current.version + 1)
            tx.put_session(newer, expected_version=current.version)
            tx.append_event(an_event("s1", seq=current.version))
            held[0] = newer

        store.transact(body)

    assert _counted(wire, write) == 2, wire.trace


def _bump(tx: Tx) -> None:
    """Read session s1, then write it back one version on."""
    current = tx.get_session("s1")
    assert current is not None
    newer = dataclasses.replace(current, version=current.version + 1)
    tx.put_session(newer, expected_version=current.version)


def test_a_transaction_that_reads_first_is_three(store: PostgresStore, wire: _Wire) -> None:
    store.transact(lambda tx: tx.put_session(a_session("s1"), expected_version=None))
    assert _counted(wire, lambda: store.transact(_bump)) == 3, wire.trace


def test_a_read_of_two_records_is_three(store: PostgresStore, wire: _Wire) -> None:
    store.transact(lambda tx: tx.put_session(a_session("s1"), expected_version=None))
    store.transact(lambda tx: tx.put_session(a_session("s2"), expected_version=None))

    def read_two(view: ReadView) -> None:
        assert view.get_session("s1") is not None
        assert view.get_session("s2") is not None

    assert _counted(wire, lambda: store.read(read_two)) == 3, wire.trace


def test_a_stale_write_found_at_the_sync_rolls_back_what_went_before(
    store: PostgresStore,
) -> None:
    store.transact(lambda tx: tx.put_session(a_session("s1"), expected_version=None))

    def stale(tx: Tx) -> None:
        tx.append_event(an_event("s1", seq=7))  # sent, not yet answered
        tx.put_session(a_session("s1"), expected_version=5)  # version 1 is stored

    with pytest.raises(ConflictError, match="expected version 5"):
        store.transact(stale)
    assert list(store.read(lambda view: view.events("s1"))) == []


def test_the_conflict_not_what_the_body_then_met_is_what_the_caller_meets(
    store: PostgresStore,
) -> None:
    store.transact(lambda tx: tx.put_session(a_session("s1"), expected_version=None))

    def body(tx: Tx) -> None:
        tx.put_session(a_session("s1"), expected_version=5)
        raise LookupError("decided on a write that did not land")

    with pytest.raises(ConflictError) as raised:
        store.transact(body)
    assert isinstance(raised.value.__cause__, LookupError)


def test_prepared_statements_survive_a_pipeline_an_error_aborted(
    store: PostgresStore, postgres_url: str
) -> None:
    store.transact(lambda tx: tx.put_session(a_session("s1"), expected_version=None))

    def fails_mid_pipeline(tx: Tx) -> None:
        # A statement the server refuses, with the store's own statements queued behind it
        # in the same pipeline: the server skips those (their preparation included).
        tx.append_event(an_event("s1", seq=1))
        store_conn = tx._conn._conn  # type: ignore[attr-defined]
        store_conn.execute("SELECT 1 / 0")
        tx.append_event(an_event("s1", seq=2))
        tx.put_session(a_session("s1"), expected_version=1)

    for _ in range(8):  # past psycopg's automatic threshold (5), had it been on
        with pytest.raises(psycopg.errors.DivisionByZero):
            store.transact(fails_mid_pipeline)
    for seq in range(1, 9):
        store.transact(lambda tx, seq=seq: tx.append_event(an_event("s1", seq=seq)))
    assert [e.seq for e in store.read(lambda v: v.events("s1"))] == list(range(1, 9))


def test_with_prepared_off_nothing_is_prepared_and_the_round_trips_stay(
    postgres_url: str, tmp_path: Path
) -> None:
    # For a pooler in transaction mode that does not track prepared statements.
    s = open_store(f"{postgres_url}&pool_min=1&pool_max=1&prepared=off")
    assert isinstance(s, PostgresStore)
    try:
        s.transact(lambda tx: tx.put_session(a_session("s1"), expected_version=None))
        wire = _Wire(s, tmp_path / "libpq.trace")
        for _ in range(6):  # past psycopg's own threshold, had it been on
            s.transact(_bump)
        assert wire.round_trips(lambda: s.transact(_bump)) == 3, wire.trace
        with s._pool.connection() as conn:
            names = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
            conn.rollback()
        assert names == []
    finally:
        s.close()
