"""SQLite's errors as the store's (:mod:`fxdurable.stores.sqlite`): what happened, to which
file, whether anything may have been written, and what to do."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from fxdurable.errors import StoreError, StoreFullError, StoreUnavailableError

__all__ = ["fault", "roll_back"]

# Primary result codes (https://sqlite.org/rescode.html); extended codes keep them in the low
# byte (SQLITE_IOERR_WRITE is SQLITE_IOERR | 3<<8).
_BUSY, _LOCKED, _IOERR, _FULL, _CANTOPEN, _PROTOCOL = 5, 6, 10, 13, 14, 15


def fault(
    exc: sqlite3.Error, path: Path, doing: str, busy_timeout_ms: int, *, committing: bool = False
) -> StoreError:
    """SQLite's error as the store's: what happened, to which file, and what to do.

    Every fault but one is a known non-commit: a lock past the busy timeout (at ``BEGIN
    IMMEDIATE``, or a ``COMMIT`` that SQLite leaves open and the store rolls back), a full
    disk (SQLite rolls the transaction back itself), an I/O error before ``COMMIT``. The one
    that is not is an I/O error *during* ``COMMIT`` (``committing``): the WAL frames and their
    commit marker may have reached the file before the write or fsync that failed, and the
    next recovery of the WAL (the file opened after a crash) may then replay the transaction.
    That outcome is unknown, and the error says so."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    where = str(path)
    if committing and primary == _IOERR:
        return StoreUnavailableError(
            f"SQLite store {path} failed with an I/O error during a commit ({exc}): it may or "
            "may not have been applied (what reached its write-ahead log may be replayed when "
            "the file is next recovered); check its disk, then read before retrying",
            where=where,
            cause=exc,
        )
    if primary == _FULL or (primary is None and "full" in str(exc)):
        return StoreFullError(
            f"SQLite store {path} is full while {doing} ({exc}): nothing was written and what "
            "was committed before is intact; free space on its disk, then retry",
            where=where,
            cause=exc,
        )
    if primary in (_BUSY, _LOCKED) or (primary is None and "locked" in str(exc)):
        return StoreUnavailableError(
            f"SQLite store {path} stayed locked by another connection past the busy timeout "
            f"({busy_timeout_ms} ms) while {doing} ({exc}): nothing was written; retry, and "
            "raise ?busy_timeout_ms= if another process holds it this long on purpose",
            where=where,
            cause=exc,
        )
    if primary in (_IOERR, _CANTOPEN, _PROTOCOL):
        return StoreUnavailableError(
            f"SQLite store {path} failed with an I/O error while {doing} ({exc}): nothing was "
            "written; check its disk and the file's permissions, then retry",
            where=where,
            cause=exc,
        )
    return StoreError(f"SQLite store {path} failed while {doing}: {exc}")


def roll_back(conn: sqlite3.Connection) -> None:
    """Roll back what is open. After a full disk or an I/O error SQLite has often rolled back
    already, and a failing ROLLBACK must not hide the error that says why."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
