"""The bench's own PostgreSQL: ``FXD_BENCH_POSTGRES_URL`` when set, else a server of the test
suite's helper (Debian's postgresql, ``initdb`` into a temporary directory, a free port,
``fsync=on``) started for the run; None where neither is available.

Each measurement takes a database of its own (:func:`fresh_database`), so repetitions and
systems never read each other's rows.
"""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ENV", "drop_database", "fresh_database", "postgres_server"]

ENV = "FXD_BENCH_POSTGRES_URL"


@contextmanager
def postgres_server() -> Iterator[str | None]:
    given = os.environ.get(ENV)
    if given:
        yield given
        return
    # The test suite's server helper (it imports its siblings by their bare names).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    # Not guarded by an ImportError: a helper that stopped importing in the bench venv (it
    # once imported pytest by way of redis_support) must fail loudly, not read as "no server".
    support = importlib.import_module("postgres_support")
    bin_dir = support.pg_bin_dir()
    if bin_dir is None:
        yield None
        return
    server = support.PostgresServer(bin_dir=bin_dir)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def fresh_database(url: str, prefix: str) -> str:
    """Create an empty database on ``url``'s server; return its URL (same user and host)."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    base, _, _query = url.partition("?")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base.rsplit('/', 1)[0]}/{name}"


def drop_database(db_url: str) -> None:
    """Drop a database :func:`fresh_database` made (its connections closed first)."""
    import psycopg

    base, name = db_url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
