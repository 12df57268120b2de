"""SQLite's failures reach users as the store's errors (issue 9 §2): a full disk, a lock held
past the busy timeout. ``except fxdurable.FxDurableError`` catches them, each names the file,
and the store stays intact."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_support import unavailable

import fxdurable as fx
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.errors import StoreFullError, StoreUnavailableError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import check_store

BIG_PROMPT = "x" * 256 * 1024  # more than the WAL holds: committing it must grow the file


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, so the disk really fills (the kernel's ENOSPC, which SQLite reports as
    SQLITE_FULL). Mounting needs root, as on our machines and in CI; elsewhere the test is
    skipped, and in CI it fails."""
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        unavailable(
            f"cannot mount a small tmpfs ({mounted.stderr.strip()}): needs root",
            "the full-disk tests",
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def _fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left; returns it (delete it to free space)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def test_a_full_disk_fails_the_admission_and_leaves_the_store_intact(small_disk):
    store = SqliteStore(f"sqlite:///{small_disk}/fx.db")
    try:
        journal = Journal(store, SystemClock(), RandomIds())
        before = [journal.admit(f"s{n}", agent="eng", prompt=f"p{n}").submission for n in range(3)]
        filler = _fill(small_disk)

        with pytest.raises(fx.FxDurableError) as caught:
            journal.admit("late", agent="eng", prompt=BIG_PROMPT)
        full = caught.value
        assert isinstance(full, StoreFullError) and isinstance(full, StoreUnavailableError)
        assert full.where == str(store.path)
        assert str(store.path) in str(full) and "free space" in str(full)
        assert isinstance(full.cause, sqlite3.OperationalError) and full.__cause__ is full.cause

        # nothing of it was written; what was committed is readable and the file is whole
        assert journal.read(lambda v: v.get_session("late")) is None
        assert [journal.read(lambda v, s=s: v.get_submission(s.id)) for s in before] == before
        assert _integrity(store.path) == "ok"

        filler.unlink()  # space again: the same store admits
        late = journal.admit("late", agent="eng", prompt=BIG_PROMPT).submission
        assert journal.read(lambda v: v.get_submission(late.id)) == late
        assert _integrity(store.path) == "ok"
        assert store.read(lambda v: check_store(v, now=time.time())).violations == ()
    finally:
        store.close()


def test_a_lock_held_past_the_busy_timeout_is_store_unavailable(tmp_path):
    store = SqliteStore(f"sqlite:///{tmp_path}/fx.db?busy_timeout_ms=50")
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        journal = Journal(store, SystemClock(), RandomIds())
        first = journal.admit("s1", agent="eng", prompt="one").submission
        other.execute("BEGIN EXCLUSIVE")  # another process in the middle of a long write
        with pytest.raises(StoreUnavailableError) as caught:
            journal.admit("s2", agent="eng", prompt="two")
        assert caught.value.where == str(store.path)
        assert "locked" in str(caught.value) and "busy_timeout_ms" in str(caught.value)
        assert journal.read(lambda v: v.get_submission(first.id)) == first  # reads go on
        other.execute("ROLLBACK")
        assert journal.admit("s2", agent="eng", prompt="two").submission.session_id == "s2"
    finally:
        other.close()
        store.close()
