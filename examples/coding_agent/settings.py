"""A session's plan mode, as the person at the page chooses it. Durable per session (a SQLite
file beside the workspace), read by the worker's permission hook before each call and written
by the page's routes, also before the session's first turn (when it has no record yet).

The file is a second store the server and the worker share, on the same machine (as demo mode's
store is); a fork starts with plan mode off (a new session, new choices). The "don't ask
again" grants are in the session's own state instead (:mod:`.grants`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SessionSettings", "Settings"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS plan_mode (session TEXT PRIMARY KEY, on_ INTEGER NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Settings:
    """One session's settings as read."""

    plan_mode: bool


class SessionSettings:
    """Every session's settings, in the SQLite file ``path`` (created on first use). Each
    call opens its own connection: the hook runs on a worker thread, the routes on others."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=10.0)) as db:
            db.execute("PRAGMA synchronous=FULL")  # a choice made is a choice kept
            db.executescript(_SCHEMA)
            with db:  # one transaction, committed on exit
                yield db

    def of(self, session: str) -> Settings:
        with self._db() as db:
            row = db.execute("SELECT on_ FROM plan_mode WHERE session = ?", (session,)).fetchone()
        return Settings(plan_mode=bool(row and row[0]))

    def set_plan_mode(self, session: str, on: bool) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO plan_mode (session, on_) VALUES (?, ?) "
                "ON CONFLICT (session) DO UPDATE SET on_ = excluded.on_",
                (session, int(on)),
            )
