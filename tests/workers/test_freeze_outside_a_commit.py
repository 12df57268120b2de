"""The fencing test's freeze: a SIGSTOP that never lands inside a SQLite commit (a frozen
lock holder would keep every other writer out, whatever its lease says)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from worker_support import freeze_outside_a_commit, sqlite_write_locked, wait_until

# Holds the write lock 40 ms of every 50: a blind SIGSTOP lands inside it four times in five.
LOCK_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
    print("ready", flush=True)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")
        time.sleep(0.04)
        conn.execute("COMMIT")
        time.sleep(0.01)
    """
)


def test_a_process_is_frozen_only_between_its_commits(tmp_path: Path) -> None:
    db = tmp_path / "locks.db"
    url = f"sqlite:///{db}"
    with subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            wait_until(lambda: sqlite_write_locked(url), 5, "the holder to take the lock")
            for _ in range(5):
                freeze_outside_a_commit(holder.pid, url)
                assert not sqlite_write_locked(url)
                os.kill(holder.pid, signal.SIGCONT)
        finally:
            holder.kill()


def test_stores_other_than_sqlite_are_never_locked() -> None:
    assert not sqlite_write_locked("redis://127.0.0.1:6379/0")
