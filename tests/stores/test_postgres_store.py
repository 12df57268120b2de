"""The PostgreSQL store's own behaviour (the contract suites run it too: tests/stores/conftest.py):
its schema version and the refusal of an outdated one, indexed reads, and the operations
faults (a killed backend mid-transaction, a held lock, an exhausted pool, a server restart)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from postgres_support import schema_connection

from fxdurable.backends import open_store
from fxdurable.core.kinds import EVENT, SUBMISSION, TOOL_TASK
from fxdurable.errors import ConfigurationError, StoreUnavailableError
from fxdurable.stores._pg_connect import PoolExhaustedError, parse_pg_url
from fxdurable.stores._pg_sql import BY_KIND, MIGRATIONS
from fxdurable.stores.postgres import PostgresStore, SchemaOutdatedError, migrate
from fxdurable.testing.store_contract.builders import a_session


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    s = open_store(postgres_url)
    assert isinstance(s, PostgresStore)
    yield s
    s.close()


def _back_to_the_previous_version(conn: psycopg.Connection[Any]) -> None:
    """Undo the newest migration (4: sessions' retention column), as a database an older
    fxdurable made would be."""
    assert len(MIGRATIONS) == 4, "undo the newest migration here"
    conn.execute("DROP INDEX sessions_retention")
    conn.execute("ALTER TABLE sessions DROP COLUMN retain_until")
    conn.execute("DELETE FROM schema_version WHERE version = %s", (len(MIGRATIONS),))


def _session(store: PostgresStore, session_id: str) -> None:
    store.transact(lambda tx: tx.put_session(a_session(session_id), expected_version=None))


def test_url_parameters_are_parsed_and_left_out_of_libpq_conninfo() -> None:
    s = parse_pg_url(
        "postgresql://u@h:5433/db?schema=s1&pool_max=3&lock_timeout_ms=50&sslmode=disable"
    )
    assert (s.schema, s.pool_max, s.lock_timeout_ms, s.where) == ("s1", 3, 50, "h:5433/db")
    assert s.conninfo == "postgresql://u@h:5433/db?sslmode=disable"
    with pytest.raises(ConfigurationError, match="pool_max"):
        parse_pg_url("postgresql://u@h/db?pool_max=x")
    with pytest.raises(ConfigurationError, match="identifier"):
        parse_pg_url("postgresql://u@h/db?schema=a;drop")
    assert parse_pg_url("postgresql://u@h/db").prepared
    assert not parse_pg_url("postgresql://u@h/db?prepared=off").prepared
    with pytest.raises(ConfigurationError, match="prepared must be on or off"):
        parse_pg_url("postgresql://u@h/db?prepared=no")


def test_an_outdated_schema_is_refused_naming_the_migrate_command(postgres_url: str) -> None:
    old = open_store(postgres_url)
    kept = old.put_blob(b"written before the migration")
    old.close()
    with schema_connection(postgres_url) as conn:
        _back_to_the_previous_version(conn)
    with pytest.raises(SchemaOutdatedError, match=re.escape(f"fxdurable migrate {postgres_url}")):
        open_store(postgres_url)
    assert migrate(postgres_url) == (len(MIGRATIONS) - 1, len(MIGRATIONS))
    store = open_store(postgres_url)  # migrated: opens, and blobs work, old and new
    assert store.get_blob(kept) == b"written before the migration"
    assert store.get_blob(store.put_blob(b"x")) == b"x"
    store.close()


@pytest.mark.parametrize(
    ("kind", "index", "value"),
    [(SUBMISSION, "unsettled", ("s",)), (TOOL_TASK, "session", ("s",)), (EVENT, "session", ("s",))],
)
def test_reads_a_step_makes_use_an_index(
    store: PostgresStore, postgres_url: str, kind: Any, index: str, value: tuple[str, ...]
) -> None:
    sql = BY_KIND[kind.name].ranges[(index, False, False)]
    with schema_connection(postgres_url) as conn:
        conn.execute("SET enable_seqscan = off")  # tiny tables: otherwise a scan is cheaper
        plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql, value))
    assert "Index" in plan and "Seq Scan" not in plan, plan


def test_a_backend_terminated_mid_transaction_is_ridden_out(
    store: PostgresStore, postgres_url: str
) -> None:
    _session(store, "a")
    runs = 0

    def body(tx: Any) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:  # the first run's connection is killed under it
            pid = tx._conn._conn.info.backend_pid  # _PgTx, then _Prepared
            with schema_connection(postgres_url) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        tx.put_session(a_session("b"), expected_version=None)
        return "done"

    assert store.transact(body) == "done"
    assert runs == 2
    assert store.read(lambda view: view.get_session("b")) is not None


def test_a_lock_held_past_lock_timeout_is_a_clear_error(postgres_server: str) -> None:
    url = f"{postgres_server}?schema=locks{threading.get_ident() % 10000}&lock_timeout_ms=100"
    store = PostgresStore(url)
    try:
        _session(store, "held")
        with schema_connection(url) as holder:
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(StoreUnavailableError, match="lock_timeout_ms"):
                store.transact(lambda tx: tx.put_session(a_session("x"), expected_version=None))
            holder.execute("ROLLBACK")
        _session(store, "after")  # the lock gone, the store writes again
    finally:
        store.close()
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{parse_pg_url(url).schema}" CASCADE')


def test_an_exhausted_pool_names_the_setting_to_raise(postgres_url: str) -> None:
    store = PostgresStore(f"{postgres_url}&pool_min=1&pool_max=1&pool_timeout_s=0.2")
    inside = threading.Event()
    release = threading.Event()

    def hold(tx: Any) -> None:
        inside.set()
        assert release.wait(10)

    worker = threading.Thread(target=store.transact, args=(hold,))
    worker.start()
    try:
        assert inside.wait(10)
        with pytest.raises(PoolExhaustedError, match="pool_max"):
            store.read(lambda view: view.list_sessions())
    finally:
        release.set()
        worker.join(10)
        store.close()


def test_a_server_restart_is_ridden_out(
    postgres_factory: Callable[..., Any],
) -> None:
    server = postgres_factory()
    store = PostgresStore(f"{server.url}?schema=restart&pool_timeout_s=30")
    try:
        _session(store, "before")
        server.kill()
        server.start()
        _session(store, "after")  # the pool's dead connections replaced, the write retried
        names = store.read(lambda view: [s.id for s in view.list_sessions()])
        assert names == ["after", "before"]
    finally:
        store.close()


def test_the_migrate_command_brings_an_outdated_schema_up_to_date(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from fxdurable.cli.main import main

    open_store(postgres_url).close()
    with schema_connection(postgres_url) as conn:
        _back_to_the_previous_version(conn)
    assert main(["migrate", postgres_url]) == 0
    assert f"to {len(MIGRATIONS)}" in capsys.readouterr().out
    assert main(["migrate", postgres_url]) == 0
    assert "nothing to migrate" in capsys.readouterr().out
    open_store(postgres_url).close()


def test_check_reads_a_postgres_store(store: PostgresStore, postgres_url: str) -> None:
    from fxdurable.cli.main import main
    from fxdurable.core.states import SessionStatus

    idle = a_session("checked", status=SessionStatus.IDLE)
    store.transact(lambda tx: tx.put_session(idle, expected_version=None))
    assert main(["check", "--store", postgres_url]) == 0
    active = a_session("broken")  # active with nothing unsettled: check must see it
    store.transact(lambda tx: tx.put_session(active, expected_version=None))
    assert main(["check", "--store", postgres_url]) == 1


def test_a_store_without_a_bucket_loads_no_aws_client(postgres_url: str) -> None:
    """The postgres extra does not need boto3: a store without ``?bucket=`` (blobs included)
    loads neither boto3 nor botocore (checked in a fresh interpreter)."""
    import json
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from fxdurable.stores.postgres import PostgresStore\n"
        f"store = PostgresStore({postgres_url!r})\n"
        "assert store.get_blob(store.put_blob(b'x' * 100_000)) == b'x' * 100_000\n"
        "store.delete_blob(store.put_blob(b'y'))\n"
        "store.close()\n"
        "print(json.dumps(sorted(m for m in ('boto3', 'botocore') if m in sys.modules)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
