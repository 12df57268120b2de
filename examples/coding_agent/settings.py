"""A session's settings the person at the page chooses: plan mode, and the tools they said
"don't ask again" for. Durable per session (a SQLite file beside the workspace), read by the
worker's permission hook before each call and written by the page's routes.

Why not ``ctx.state``: a session's persisted state is written only by its tool calls (committed
with their results), while these are a person's choices, made between calls or before the
first turn; the hook that honours them runs before a call, where no state is written. The
file is a second store the server and the worker share, on the same machine (as demo mode's
store is); a fork starts with none of its source's settings (a new session, new choices).
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
CREATE TABLE IF NOT EXISTS allowed_tools (
    session TEXT NOT NULL, tool TEXT NOT NULL, PRIMARY KEY (session, tool)
);
"""


@dataclass(frozen=True, slots=True)
class Settings:
    """One session's settings as read."""

    plan_mode: bool
    allowed_tools: tuple[str, ...]


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
            tools = db.execute(
                "SELECT tool FROM allowed_tools WHERE session = ? ORDER BY tool", (session,)
            ).fetchall()
        return Settings(plan_mode=bool(row and row[0]), allowed_tools=tuple(t for (t,) in tools))

    def set_plan_mode(self, session: str, on: bool) -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO plan_mode (session, on_) VALUES (?, ?) "
                "ON CONFLICT (session) DO UPDATE SET on_ = excluded.on_",
                (session, int(on)),
            )

    def allow(self, session: str, tool: str) -> None:
        with self._db() as db:
            db.execute(
                "INSERT OR IGNORE INTO allowed_tools (session, tool) VALUES (?, ?)", (session, tool)
            )

    def revoke(self, session: str, tool: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM allowed_tools WHERE session = ? AND tool = ?", (session, tool))
