"""Opening a SQLite store migrates an old schema, and writes nothing to a current one (issue
10: a worker opens its store per wake, and must not queue for the write lock to learn that
there is nothing to migrate)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fxdurable.errors import StoreUnavailableError
from fxdurable.stores.sqlite import _MIGRATIONS, SqliteStore


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


def _version_1_file(db: Path) -> None:
    """A file as fxdurable wrote it before blobs (schema version 1), holding a session."""

    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.executescript(_MIGRATIONS[0])
        conn.execute("INSERT INTO schema_version (version) VALUES (1)")
        conn.execute(
            "INSERT INTO sessions (id, status, version, data) VALUES ('s1', 'idle', 1, '{}')"
        )


def test_a_version_1_file_gains_blobs_and_keeps_its_records(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _version_1_file(db)
    store = SqliteStore(_url(db))
    try:
        digest = store.put_blob(b"new")
        assert store.get_blob(digest) == b"new"
    finally:
        store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id FROM sessions").fetchall() == [("s1",)]
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        assert version == len(_MIGRATIONS)


def test_a_read_only_open_reads_a_version_1_file_without_migrating_it(tmp_path: Path) -> None:
    """``fxdurable trace``/``check`` on a file no upgraded worker has opened yet."""
    db = tmp_path / "v1.db"
    _version_1_file(db)
    store = SqliteStore(_url(db), create=False)
    try:
        assert store.get_blob("0" * 64) is None  # no blobs table yet: no blobs
    finally:
        store.close()
    assert "blobs" not in _tables(db)


def test_a_writer_adds_the_retention_index_without_a_schema_version(tmp_path: Path) -> None:
    """The retention sweep's index (an expression over the record's JSON) is made by a
    writer's open of a file that lacks it, its schema version unchanged: a worker of the
    previous release, which refuses a newer version, still opens the file (a rolling deploy)."""
    db = tmp_path / "s.db"
    SqliteStore(_url(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX sessions_retention")  # as the previous release left it
    SqliteStore(_url(db)).close()
    with sqlite3.connect(db) as conn:
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    assert "sessions_retention" in names
    assert version == len(_MIGRATIONS) == 2
