"""The retention sweep: erase every idle session past its agent's ``retention_days``.

Run by ``fxdurable scan`` (each pass) and by the scan Lambda (each invocation), beside the
reconciliation scan; it needs only the store (the retention is recorded on each session,
:mod:`fxdurable.core.retention`), no agent and no queue.

Each pass reads the store's ``retention`` index, earliest due first, ``batch`` at a time, and
erases each due session through :func:`~fxdurable.runtime.erase.erase_session` with
``only_if_due``: its first step re-checks, inside the transaction that records the erase
marker, that the session is still due, so one admitted, steered or answered since the read is
kept. A kill mid-sweep leaves at most one resumable erase (its marker), which the next
``fxdurable erase`` of it completes and ``fxdurable check`` names; the marker takes the
session out of the index, so the sweep does not retry it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from fxdurable.core.journal import Journal
from fxdurable.core.retention import NotDue, due_sessions
from fxdurable.errors import SessionBusyError, SessionNotFoundError
from fxdurable.runtime.erase import erase_session

__all__ = ["RetentionReport", "sweep_retention"]

SWEEP_BATCH = 100


@dataclass(slots=True)
class RetentionReport:
    """What one sweep did."""

    erased: list[str] = field(default_factory=list)  # sessions erased (their subagents too)
    kept: list[str] = field(default_factory=list)  # due when read, not when re-checked
    records: int = 0  # records deleted in all

    def summary(self) -> dict[str, int]:
        return {"expired": len(self.erased), "kept": len(self.kept), "records": self.records}


def sweep_retention(journal: Journal, *, batch: int = SWEEP_BATCH) -> RetentionReport:
    """Erase every session due by the journal's clock (see the module). Each session is
    tried once per sweep: one the re-check keeps, or whose index entry lags its record, is
    not read again, so a sweep ends even if the index is behind."""
    report = RetentionReport()
    tried: set[str] = set()
    while True:
        due = journal.read(functools.partial(due_sessions, now=journal.now(), limit=batch))
        fresh = [s for s in due if s not in tried]
        for session_id in fresh:
            tried.add(session_id)
            try:
                done = erase_session(journal, session_id, only_if_due=True)
            except (NotDue, SessionBusyError, SessionNotFoundError):
                report.kept.append(session_id)
                continue
            report.erased.append(session_id)
            report.records += done.records
        if not fresh or len(due) < batch:
            return report
