"""Retention by last activity: when an idle session falls due for erasure (docs/erasure.md).

An agent's ``retention_days`` (``fx.Agent(retention_days=...)``; None, the default, keeps its
sessions forever) is recorded on the session at each admission (``SessionRecord
.retention_days``), so the sweep decides from the store alone: it has no agent registry and
imports no user code (the Lambda scan function has neither).

**Last activity** is the session's latest event (``SessionRecord.updated_at``): a submission
admitted or settled, a steer, a question answered (or expired), a state change, a webhook
delivered. Every transition that records one writes the session record, and the template's
commit stamps :func:`retain_until` there, so no transition repeats it.

A session is **due** when it is idle (``status`` ``idle``: nothing queued or running) and its
last activity is older than its retention. A session whose turn waits for a person's answer
is not idle (its submission stays ``running``, :mod:`fxdurable.core.asking`), so it is never
due while it waits: the wait ends by an answer, an abort or the question's own timer, and
retention counts from then. A session being erased (its marker set) is not due either: the
erase already owns it.

The index: ``retain_until`` is a column of the session kind, and its ``retention`` index
holds only the sessions that have one, ordered by it, so the sweep reads the earliest due
ones and stops at the first not due: what it reads is what it erases, never every session.
"""

from __future__ import annotations

import math
from dataclasses import replace

from fxdurable.core.kinds import SESSION
from fxdurable.core.records import SessionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import ReadView

__all__ = [
    "DAY_S",
    "ERASE_MARKER_KEY",
    "NotDue",
    "check_retention_days",
    "due_sessions",
    "is_due",
    "retain_until",
    "stamped",
]

DAY_S = 86_400.0
ERASE_MARKER_KEY = "fx.erase"  # journal/_base.py's ERASE_KEY (core may not import journal)


def check_retention_days(value: object) -> float | None:
    """``value`` as a retention: a positive, finite number of days, or None (kept forever).
    ValueError otherwise (the agent turns it into ConfigurationError)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"retention_days must be a number of days or None, not {value!r}")
    days = float(value)
    if not math.isfinite(days) or days <= 0:
        raise ValueError(f"retention_days must be positive (None keeps sessions), not {value!r}")
    return days


def retain_until(session: SessionRecord) -> float | None:
    """When ``session`` falls due as it stands (None: never, as it stands)."""
    if session.retention_days is None or session.status != SessionStatus.IDLE:
        return None
    if ERASE_MARKER_KEY in session.state:
        return None
    last = session.updated_at if session.updated_at is not None else session.created_at
    return last + session.retention_days * DAY_S


def stamped(session: SessionRecord) -> SessionRecord:
    """``session`` with its ``retain_until`` brought up to date (the same object if it is)."""
    due = retain_until(session)
    if due == session.retain_until:
        return session
    return replace(session, retain_until=due)


def is_due(session: SessionRecord, now: float) -> bool:
    """The sweep may erase ``session`` now: decided from the record as read in the erase's
    own transaction, so a session active again since the sweep's read is kept."""
    due = retain_until(session)
    return due is not None and due <= now


def due_sessions(view: ReadView, now: float, *, limit: int) -> list[str]:
    """The ids of at most ``limit`` sessions due by ``now``, earliest first: one read of the
    ``retention`` index, which stops at ``limit`` (never every session)."""
    found = view.range(SESSION, "retention", limit=limit)
    return [s.id for s in found if is_due(s, now)]


class NotDue(Exception):  # a signal between the erase and the sweep, not a user error
    """The session is not due for retention any more (active, or active again, since the
    sweep read it): ``begin_erase(only_if_due=True)`` wrote nothing."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is not due for retention")
        self.session_id = session_id
