"""The test run's own PostgreSQL (tests/postgres_support.py) is what the store tests need: a
real server with fsync on, a schema per test, and a dedicated server that survives SIGKILL."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from postgres_support import PostgresServer


def test_the_run_server_has_fsync_on_and_a_schema_per_test(postgres_url: str) -> None:
    base, _, query = postgres_url.partition("?")
    schema = query.removeprefix("schema=")
    assert schema.startswith("t")
    with psycopg.connect(base, autocommit=True) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("on",)
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE TABLE "{schema}".marker (id int PRIMARY KEY)')


def test_a_committed_row_survives_a_sigkill_of_the_whole_server(
    postgres_factory: Callable[..., PostgresServer],
) -> None:
    server = postgres_factory()
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (id int PRIMARY KEY)")
        conn.execute("INSERT INTO kept VALUES (1)")
    held = psycopg.connect(server.url)
    held.execute("INSERT INTO kept VALUES (2)")  # open transaction, never committed
    server.restart(crash=True)
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")  # the connection died with the server
    held.close()
    with psycopg.connect(server.url) as conn:
        assert conn.execute("SELECT id FROM kept ORDER BY id").fetchall() == [(1,)]
