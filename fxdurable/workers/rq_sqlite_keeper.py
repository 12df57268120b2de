"""A forking worker's SQLite database, kept open between its work horses by a small process.

Each horse opens the database itself (no SQLite connection may cross a fork:
https://sqlite.org/howtocorrupt.html#fork) and closes it when its job ends. When that close is
the last connection to the database anywhere, SQLite checkpoints the whole write-ahead log into
the database file (two more fsyncs at ``synchronous=FULL``) and deletes the log and its shared
index, which the next horse then creates again: on one worker that is every job, about a fifth
of a one-turn job's time on a busy 2-core machine (``bench.rq_job_phases``).

The keeper is a separate program (started with ``exec``, not a fork of the worker, so it
shares no SQLite state with it) that opens the database, reads it once to attach to its
write-ahead log, and waits with no transaction open until its stdin closes: when the worker
stops (or dies: the pipe closes with it). Holding no transaction, it never delays a
checkpoint; the committing connections still checkpoint the log as it grows (SQLite's
``wal_autocheckpoint``), as they do in a ``--no-fork`` worker that keeps its connections. What
is durable does not change: a commit is on disk (fsynced at ``FULL``) once it returns,
whether or not it was checkpointed. A keeper that dies leaves the horses as they were
without it: each last close checkpoints again.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from pathlib import Path

__all__ = ["KEEPER_MARK", "SqliteKeeper"]

log = logging.getLogger("fxdurable.worker")

#: What the keeper runs (only the standard library: it starts in a few milliseconds).
_KEEPER = """
import signal, sqlite3, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker's Ctrl-C is the worker's to handle
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
sys.stdout.write("open\\n")
sys.stdout.flush()
sys.stdin.read()
conn.close()
"""

#: The keeper's last argument: what tells it apart from the worker's other children, its
#: work horses (``ps``, the tests).
KEEPER_MARK = "fxdurable-sqlite-keeper"

#: How long the worker waits for the keeper to open the database or to end.
_WAIT_S = 10.0


class SqliteKeeper:
    """The keeper process of one SQLite database (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._process: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _KEEPER, str(path), KEEPER_MARK],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        # Its first read attaches it to the log before the first horse opens the database.
        if self._process.stdout.readline().strip() != "open":
            log.warning("the keeper of %s did not open it: horses checkpoint as they close", path)
            self.close()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def close(self) -> None:
        """End the keeper (it closes the database, checkpointing the log as the last one)."""
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
