"""The embedded default store: one SQLite file, WAL mode, ``synchronous=FULL``.

``FULL`` fsyncs the WAL at every commit, so a committed step survives a power cut, not only a
SIGKILL; ``?synchronous=NORMAL`` in the URL trades that for speed (a power cut may then lose
the last commits, never corrupt the file). Each thread gets its own connection; writers are
serialised by ``BEGIN IMMEDIATE``, which also gives each transaction a consistent view. This
process's transactions that queue while another commits share the next commit (one fsync for
several sessions' steps; :mod:`fxdurable.stores._group_commit`), each in a savepoint of its
own; a transaction that arrives alone commits alone, as before.

SQLite's own errors never leave this module: a full disk raises
:class:`~fxdurable.errors.StoreFullError`, a lock held past the busy timeout or an I/O error
:class:`~fxdurable.errors.StoreUnavailableError`, anything else :class:`StoreError`; each names
the file and keeps SQLite's error as its cause. SQLite rolls a failed transaction back, so the
file stays as it was before the call.

Each record is one row: key and query columns beside the record's JSON (``data``), so the
schema changes only when a query needs a new column. Migrations are forward-only and numbered;
a writer's open applies what is missing, a read-only open (``create=False``) reads any version
from 1 on and writes nothing (an older file simply has no blobs yet).

Blobs (``put_blob``) are rows of their own table, each put its own short transaction
(``INSERT OR IGNORE``: the same bytes are the same row), outside any ``transact``;
``blob_digests`` reads the table's primary key in pages of
:data:`~fxdurable.core.blobs.DIGEST_PAGE`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlparse

from fxdurable.core.blobs import blob_digest, by_page, is_digest, verified
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import ConfigurationError, ConflictError, StoreError
from fxdurable.stores._body import refuse_awaitable
from fxdurable.stores._group_commit import GroupCommit, Queued
from fxdurable.stores._sql_tables import SqlTable, SqlTx, sql_tables
from fxdurable.stores._sqlite_faults import fault as _fault
from fxdurable.stores._sqlite_faults import roll_back as _roll_back

__all__ = ["SqliteStore"]

T = TypeVar("T")
R = TypeVar("R")

_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY, status TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL
    );
    CREATE INDEX sessions_status ON sessions(status);
    CREATE TABLE submissions (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL,
        request_id TEXT NOT NULL UNIQUE, status TEXT NOT NULL, version INTEGER NOT NULL,
        data TEXT NOT NULL, UNIQUE (session_id, seq)
    );
    CREATE INDEX submissions_unsettled ON submissions(session_id, seq)
        WHERE status IN ('queued', 'running');
    CREATE TABLE attempts (
        submission_id TEXT NOT NULL, number INTEGER NOT NULL, version INTEGER NOT NULL,
        data TEXT NOT NULL, PRIMARY KEY (submission_id, number)
    );
    CREATE TABLE turns (id TEXT PRIMARY KEY, version INTEGER NOT NULL, data TEXT NOT NULL);
    CREATE TABLE model_calls (
        turn_id TEXT NOT NULL, round INTEGER NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (turn_id, round)
    );
    CREATE TABLE tool_tasks (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
        round INTEGER NOT NULL, idx INTEGER NOT NULL, version INTEGER NOT NULL,
        data TEXT NOT NULL, UNIQUE (turn_id, round, idx)
    );
    CREATE INDEX tool_tasks_session ON tool_tasks(session_id);
    CREATE TABLE messages (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE events (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    """,
    # 2: content-addressed blobs (store.put_blob); a table of its own, so adding it leaves
    # every record of a version-1 file as it was.
    """
    CREATE TABLE blobs (digest TEXT PRIMARY KEY, data BLOB NOT NULL);
    """,
)

# Columns read from the record's JSON rather than stored (``_sql_tables.sql_tables``'s
# ``derived``), and their indexes: an index on an expression needs no new column, so no schema
# version, so a worker of the previous release still opens the file beside a current one (a
# rolling deploy, docs/upgrading.md: an older fxdurable refuses a newer schema version). SQLite
# keeps the index whoever writes the row, and an older worker never reads by it.
_DERIVED = {"retain_until": "json_extract(data, '$.retain_until')"}
# name -> statement; each created on a writer's open when missing (a plain read finds it).
_DERIVED_INDEXES = {
    # when an idle session falls due for the retention sweep (core/retention.py): only the
    # sessions that have a retention are in it.
    "sessions_retention": (
        "CREATE INDEX IF NOT EXISTS sessions_retention ON sessions"
        f"({_DERIVED['retain_until']}, id) WHERE {_DERIVED['retain_until']} IS NOT NULL"
    ),
}


def _schema_version(conn: sqlite3.Connection) -> int | None:
    """The schema version a file records, or None when it has no version table yet."""
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return int(row[0] or 0)


# No order of its own: insertion order, which is the rowid's (rows are never re-inserted).
_BY_KIND = sql_tables("?", insertion_order=lambda table, index: "rowid", derived=_DERIVED)


class _SqliteTx(SqlTx):
    """The four primitives on one connection, inside the caller's transaction. ``delete``:
    secure_delete (set on every connection) zeroes the freed bytes in the page, so the
    record's text leaves the file, not only the table."""

    __slots__ = ()
    tables = _BY_KIND

    def _insert_row(
        self, table: SqlTable, args: tuple[object, ...], conflict: Callable[[], str]
    ) -> None:
        try:
            self._conn.execute(table.insert, args)
        except sqlite3.IntegrityError:
            raise ConflictError(conflict()) from None


@dataclass(frozen=True, slots=True)
class _Slot:
    conn: sqlite3.Connection
    lock: threading.RLock


class SqliteStore:
    """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``.

    Query options: ``synchronous=FULL|NORMAL`` (default FULL), ``busy_timeout_ms`` (default
    10000: how long a writer waits for another process's transaction).
    """

    def __init__(self, url: str, *, create: bool = True, schema_checked: bool = False) -> None:
        """``schema_checked``: another process of this deployment (the forking worker whose
        work horse this is) has just migrated or checked the file, so no connection is opened
        here to check it again; the first call opens this thread's."""
        parsed = urlparse(url)
        if url.startswith("sqlite:") and not url.startswith("sqlite://"):
            # RFC 3986, as SQLAlchemy reads it: three slashes then the path, so a fourth
            # makes it absolute. sqlite:/x.db would silently mean ./x.db: refused instead.
            rest = url.removeprefix("sqlite:").lstrip("/")
            raise ConfigurationError(
                f"ambiguous SQLite URL {url!r}: write sqlite:///{rest} for the relative path "
                f"{rest} or sqlite:////{rest} for /{rest}"
            )
        if (
            parsed.scheme != "sqlite"
            or parsed.netloc
            or not parsed.path
            or parsed.path == "/"
            or ":memory:" in parsed.path
        ):
            raise ConfigurationError(
                f"not a SQLite URL: {url!r} (expected sqlite:///relative.db or "
                "sqlite:////absolute/path.db; no host, and no :memory:, which each thread "
                "would see as a different empty database)"
            )
        self.url = url
        options = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
        self._synchronous = options.pop("synchronous", "FULL").upper()
        if self._synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ConfigurationError(f"synchronous must be FULL, NORMAL or EXTRA in {url!r}")
        try:
            self._busy_timeout_ms = int(options.pop("busy_timeout_ms", "10000"))
        except ValueError as exc:
            raise ConfigurationError(f"busy_timeout_ms must be an integer in {url!r}") from exc
        if options:
            raise ConfigurationError(f"unknown SQLite URL options {sorted(options)} in {url!r}")
        # sqlite:///x.db -> "x.db" (relative); sqlite:////abs/x.db -> "/abs/x.db"
        self.path = Path(unquote(parsed.path[1:]))
        if not create and not self.path.is_file():
            raise StoreError(f"no fxdurable store at {self.path}: the file does not exist")
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._slots: list[_Slot] = []
        self._closed = False
        self._lock = threading.Lock()
        self._group = GroupCommit(self._commit_group)
        if schema_checked:
            pass
        elif create:
            self._migrate()
        else:
            self._check_schema()

    def _conn(self) -> sqlite3.Connection:
        return self._slot().conn

    def _slot(self) -> _Slot:
        slot: _Slot | None = getattr(self._local, "slot", None)
        if slot is None:
            if self._closed:
                raise StoreError(f"SQLite store {self.path} is closed")
            conn = self._open_connection()
            slot = _Slot(conn, threading.RLock())
            self._local.slot = slot
            with self._lock:
                self._slots.append(slot)
        return slot

    def _open_connection(self) -> sqlite3.Connection:
        """A configured connection. Several processes may open a new file at once: switching
        it to WAL needs an exclusive lock, and SQLite answers "database is locked" at once
        (without its busy handler) to all but one of them, so the open is retried for up to
        ``busy_timeout_ms``."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        pause = 0.005
        while True:
            conn: sqlite3.Connection | None = None
            try:
                conn = sqlite3.connect(
                    self.path,
                    isolation_level=None,
                    timeout=self._busy_timeout_ms / 1000,
                    check_same_thread=False,
                )
                conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={self._synchronous}")
                # Erasure (docs/erasure.md): freed cells and pages are overwritten with zeros,
                # so a deleted or rewritten record's bytes do not linger in the file.
                conn.execute("PRAGMA secure_delete=ON")
                return conn
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                locked = isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
                if not locked or time.monotonic() >= deadline:
                    raise self._fault(exc, "opening it") from exc
                time.sleep(pause)
                pause = min(pause * 2, 0.1)

    def _fault(self, exc: sqlite3.Error, doing: str, *, committing: bool = False) -> StoreError:
        return _fault(exc, self.path, doing, self._busy_timeout_ms, committing=committing)

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._fault(exc, "committing", committing=True) from exc

    @contextlib.contextmanager
    def _faults(self, doing: str) -> Iterator[None]:
        """Raise SQLite's errors in the body as the store's (see the module's docstring)."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._fault(exc, doing) from exc

    @contextlib.contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held so that close() waits for the work in flight.

        A journal call cancelled on the event loop keeps running in its thread; closing its
        connection under it would crash the interpreter inside sqlite3.
        """
        slot = self._slot()
        with slot.lock:
            if self._closed:
                raise StoreError(f"SQLite store {self.path} is closed")
            yield slot.conn

    def _check_schema(self) -> None:
        """For read-only tools (trace, check): never write to a file we were pointed at."""
        conn = self._conn()
        try:
            version = _schema_version(conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not an fxdurable store ({exc})") from exc
        if version is None:
            raise StoreError(f"{self.path} is not an fxdurable store (no schema_version table)")
        if not 1 <= version <= len(_MIGRATIONS):
            raise StoreError(
                f"{self.path} has fxdurable schema version {version}, this fxdurable reads "
                f"versions 1 to {len(_MIGRATIONS)}: open it with a matching fxdurable"
            )

    def _migrate(self) -> None:
        with self._faults("migrating its schema"):
            conn = self._conn()
            # A plain read first: a store opened per wake must not queue for the write lock
            # (BEGIN IMMEDIATE) behind every other worker's commits only to find nothing to do.
            if _schema_version(conn) != len(_MIGRATIONS):
                self._migrate_on(conn)
            self._add_derived_indexes(conn)

    def _add_derived_indexes(self, conn: sqlite3.Connection) -> None:
        """The ``_DERIVED_INDEXES`` a file lacks (one an older fxdurable made): a plain read,
        and the write lock only when one is missing."""
        found = {
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        missing = [sql for name, sql in _DERIVED_INDEXES.items() if name not in found]
        if not missing:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql in missing:
                conn.execute(sql)
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise

    def _migrate_on(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
            current = row[0] or 0
            if current > len(_MIGRATIONS):
                raise StoreError(
                    f"{self.path} has schema version {current}, newer than this fxdurable "
                    f"understands ({len(_MIGRATIONS)}): upgrade fxdurable"
                )
            for number, script in enumerate(_MIGRATIONS[current:], start=current + 1):
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise

    def transact(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` in a write transaction and commit it: alone, or with the
        transactions of other threads that queued while a commit was in progress, in one
        commit (one fsync) of them all (:mod:`fxdurable.stores._group_commit`)."""
        return self._group.run(body)

    def _commit_group(self, group: Sequence[Queued[Any]]) -> None:
        with self._using() as conn, self._faults("writing"):
            conn.execute("BEGIN IMMEDIATE")
            try:
                if len(group) == 1:
                    result = group[0].body(_SqliteTx(conn))
                    refuse_awaitable(result)
                    self._commit(conn)
                    group[0].succeed(result)
                    return
                ran = [(job, result) for job, result in self._each_savepoint(conn, group)]
                if ran:
                    self._commit(conn)
                for job, result in ran:
                    job.succeed(result)
            finally:
                _roll_back(conn)  # a no-op after the commit

    def _each_savepoint(
        self, conn: sqlite3.Connection, group: Sequence[Queued[Any]]
    ) -> Iterator[tuple[Queued[Any], Any]]:
        """Each body of a group in a savepoint of its own, so that one that fails is undone
        alone; yields those that ran, with their results, to be settled after the commit."""
        for job in group:
            conn.execute("SAVEPOINT grouped")
            try:
                result = job.body(_SqliteTx(conn))
                refuse_awaitable(result)
            except BaseException as exc:
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back (a full disk, an I/O error):
                    # the group's earlier writes are gone too, so none of it commits.
                    raise
                conn.execute("ROLLBACK TO grouped")
                conn.execute("RELEASE grouped")
                job.fail(self._fault(exc, "writing") if isinstance(exc, sqlite3.Error) else exc)
                continue
            conn.execute("RELEASE grouped")
            yield job, result

    def read(self, body: Callable[[ReadView], T]) -> T:
        with self._using() as conn, self._faults("reading"):
            conn.execute("BEGIN")
            try:
                return body(_SqliteTx(conn))
            finally:
                _roll_back(conn)

    def put_blob(self, data: bytes) -> str:
        digest = blob_digest(data)
        with self._using() as conn, self._faults("storing a blob"):
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT OR IGNORE INTO blobs (digest, data) VALUES (?, ?)",
                    (digest, bytes(data)),
                )
                conn.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise
        return digest

    def get_blob(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        with self._using() as conn, self._faults("reading a blob"):
            try:
                row = conn.execute("SELECT data FROM blobs WHERE digest = ?", (digest,)).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # a version-1 file opened read-only
                    return None
                raise
        return None if row is None else verified(digest, bytes(row[0]), str(self.path))

    def delete_blob(self, digest: str) -> None:
        if not is_digest(digest):
            return
        with self._using() as conn, self._faults("deleting a blob"):
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM blobs WHERE digest = ?", (digest,))
                conn.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise
            self.checkpoint()

    def blob_digests(self) -> Iterator[str]:
        return by_page(self._digests_after)

    def _digests_after(self, last: str, limit: int) -> list[str]:
        with self._using() as conn, self._faults("listing blobs"):
            try:
                rows = conn.execute(
                    "SELECT digest FROM blobs WHERE digest > ? ORDER BY digest LIMIT ?",
                    (last, limit),
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):  # a version-1 file opened read-only
                    return []
                raise
        return [digest for (digest,) in rows]

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the file and truncate it: what a delete removed is
        then gone from the WAL too (the erase calls it last). Best effort: a reader holding
        an old snapshot keeps the WAL until it ends, and the next checkpoint completes it."""
        with self._using() as conn, self._faults("checkpointing"):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    def close(self) -> None:
        """Close every connection, waiting for each one's transaction in flight."""
        self._closed = True
        with self._lock:
            slots, self._slots = self._slots, []
        for slot in slots:
            with slot.lock:
                slot.conn.close()
