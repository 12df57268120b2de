"""Opening a SQLite store migrates an old schema, and writes nothing to a current one (issue
10: a worker opens its store per wake, and must not queue for the write lock to learn that
there is nothing to migrate)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fxdurable.errors import StoreUnavailableError
from fxdurable.stores.sqlite import SqliteStore


def _url(path: Path, **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"sqlite:///{path.resolve()}" + (f"?{query}" if query else "")


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_an_old_schema_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:  # version 0: the version table, nothing migrated yet
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    SqliteStore(_url(db)).close()
    assert {"sessions", "submissions", "events"} <= _tables(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] >= 1


def test_a_current_schema_is_opened_without_taking_the_write_lock(tmp_path: Path) -> None:
    db = tmp_path / "current.db"
    SqliteStore(_url(db)).close()
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        SqliteStore(_url(db, busy_timeout_ms="100")).close()  # a write would time out

        # The same lock stops an open that has something to migrate: the check is not vacuous.
        writer.execute("DELETE FROM schema_version")
        writer.execute("COMMIT")
        writer.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError):
            SqliteStore(_url(db, busy_timeout_ms="100"))
    finally:
        writer.execute("ROLLBACK")
        writer.close()
