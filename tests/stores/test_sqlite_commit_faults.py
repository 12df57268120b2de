"""What a failed SQLite commit means (fxdurable.stores.sqlite._fault): every fault is a known
non-commit except an I/O error during COMMIT, whose outcome is unknown and is said so.

SQLite's faults are local: a real I/O error cannot be made on demand here (the full-disk and
lock cases run for real in test_sqlite_faults.py), so these give the classifier SQLite's own
error codes (https://sqlite.org/rescode.html)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fxdurable.errors import StoreFullError, StoreUnavailableError
from fxdurable.stores.sqlite import _fault

IOERR_FSYNC = 10 | (4 << 8)
FULL, BUSY = 13, 5


def _error(message: str, code: int) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


def test_an_io_error_during_commit_is_an_unknown_outcome(tmp_path: Path) -> None:
    error = _fault(
        _error("disk I/O error", IOERR_FSYNC), tmp_path / "s.db", "committing", 100, committing=True
    )
    assert isinstance(error, StoreUnavailableError)
    assert "may or may not have been applied" in str(error)
    assert "nothing was written" not in str(error)


@pytest.mark.parametrize(
    ("message", "code", "committing", "kind"),
    [
        ("disk I/O error", IOERR_FSYNC, False, StoreUnavailableError),  # before COMMIT
        ("database or disk is full", FULL, True, StoreFullError),  # SQLite rolled it back
        ("database is locked", BUSY, True, StoreUnavailableError),  # the store rolls it back
        ("database is locked", BUSY, False, StoreUnavailableError),  # at BEGIN IMMEDIATE
    ],
)
def test_every_other_fault_is_a_known_non_commit(
    tmp_path: Path, message: str, code: int, committing: bool, kind: type[Exception]
) -> None:
    error = _fault(_error(message, code), tmp_path / "s.db", "writing", 100, committing=committing)
    assert type(error) is kind
    assert "nothing was written" in str(error)
