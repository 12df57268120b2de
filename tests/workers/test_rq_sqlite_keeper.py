"""A forking worker's keeper holds its SQLite database open between work horses."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from fxdurable.workers.rq_sqlite_keeper import SqliteKeeper

pytestmark = pytest.mark.system  # the keeper is a process of its own


def _commit_and_close(path: Path) -> None:
    """What a work horse does: open, commit at WAL, close."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.close()


def test_a_horses_close_is_not_the_last_one_while_the_keeper_runs(tmp_path: Path) -> None:
    db = tmp_path / "fxd.db"
    wal = tmp_path / "fxd.db-wal"
    _commit_and_close(db)
    assert not wal.exists()  # the last close checkpointed the log and deleted it
    keeper = SqliteKeeper(db)
    try:
        assert keeper.pid is not None
        _commit_and_close(db)
        _commit_and_close(db)
        assert wal.exists()  # kept for the next horse, its commits still in it
        with contextlib.closing(sqlite3.connect(db)) as reader:
            assert reader.execute("SELECT count(*) FROM t").fetchone()[0] == 3
    finally:
        pid = keeper.pid
        keeper.close()
    assert not wal.exists()  # the keeper's was the last close
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the keeper {pid} outlived its close")
