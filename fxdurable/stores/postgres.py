"""The PostgreSQL store: ``postgresql://user@host:port/db?schema=fxdurable``.

Tables and statements come from the kinds (:mod:`fxdurable.stores._pg_sql`), connections
from a pool (:mod:`fxdurable.stores._pg_connect`, where the URL's parameters are listed).

Isolation. Each ``transact(body)`` is one ``SERIALIZABLE`` transaction, re-run on a
serialization failure (SQLSTATE 40001) through :func:`fxdurable.core.optimistic.optimistic`.
Why not READ COMMITTED with version-checked UPDATEs only: a body reads more than it writes
(the unsettled submissions of a session, a turn's tool tasks) and decides from those reads;
under READ COMMITTED a read of rows it does not write is not protected, and the two reads of
one body need not even see the same state. SERIALIZABLE gives every body what SQLite's one
serialised writer gives it, so the journal's reasoning holds unchanged; a body that lost a
race is simply run again on fresh reads, as on Redis and DynamoDB. The version check stays
in the UPDATE (``WHERE version = %s``, rowcount 0 is :class:`~fxdurable.errors.ConflictError`)
for a caller whose expected version came from an earlier transaction.

Driver. psycopg's sync API, called in the journal's worker thread as SQLite's is: the durable
core is synchronous, and an async driver would need an event loop of its own per thread.

Round trips. Each transaction runs in psycopg's pipeline mode: statements go out without
waiting for their answers, and a round trip is paid only where the body needs an answer (a
read) and at the end. The writes' row counts (the version check of an UPDATE, the ``ON
CONFLICT DO NOTHING`` of an INSERT) are checked when the pipeline syncs, before COMMIT: a
write that touched no row is a ``ConflictError`` and the transaction is rolled back, so it
wrote nothing, as it would had the check been made at once. The COMMIT then goes alone, so
that a lost answer is a lost COMMIT and nothing else. A transaction that only writes (the
lease holder's, from the records it holds) is two round trips; one that reads first, three.

A lost COMMIT. When the connection breaks during ``COMMIT`` the outcome is unknown. Every
transaction learns its transaction id in its first round trip (``pg_current_xact_id()``,
sent with the ``BEGIN``), so after a lost COMMIT the store asks the server
(``pg_xact_status``) on a new connection: committed means done (the body's result is
returned), aborted means run it again; it never guesses.

Schema. Numbered forward-only migrations with a version row (``schema_version``). Opening an
empty schema creates it; opening one older than this code refuses with
:class:`~fxdurable.errors.SchemaOutdatedError` (also importable from here), which names
``fxdurable migrate URL``: a migration on a shared database is an operator's decision, not a
side effect of a worker's start.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from fxdurable.core.optimistic import Rerun, contention_backoff, optimistic
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import (
    ConflictError,
    SchemaOutdatedError,
    StoreError,
    StoreUnavailableError,
)
from fxdurable.stores._body import refuse_awaitable
from fxdurable.stores._notify_pg import PgNotifier
from fxdurable.stores._pg_blobs import PgBlobs
from fxdurable.stores._pg_connect import (
    PgSettings,
    PoolExhaustedError,
    open_pool,
    parse_pg_url,
    pool_exhausted,
    quote_ident,
)
from fxdurable.stores._pg_sql import BY_KIND, MIGRATIONS
from fxdurable.stores._sql_tables import SqlTable, SqlTx

__all__ = ["PostgresStore", "SchemaOutdatedError", "migrate"]

T = TypeVar("T")
R = TypeVar("R")

Conn = psycopg.Connection[tuple[Any, ...]]

_log = logging.getLogger("fxdurable.stores.postgres")


class _PoolUnreachable(psycopg.OperationalError):
    """No connection within ``pool_timeout_s`` while the pool had room for more: it could not
    open one (the server is away or restarting). Handled as a lost connection: nothing was
    written, so the caller's retry loop goes on."""


_ATTEMPTS = 50  # serialization failures in a row before a transaction gives up
_RECONNECTS = 5  # lost connections in a row before a transaction gives up
_XACT_WAIT_S = 5.0  # how long a lost COMMIT's status may stay "in progress"


class _Prepared:
    """A connection whose every statement is prepared on its first use (``prepare=True``;
    why not psycopg's automatic preparation: stores/_pg_connect.py ``configure``), or never
    (``?prepared=off``). The statements are the kinds' few dozen, generated once
    (:mod:`._pg_sql`), so each is parsed and planned once per connection."""

    __slots__ = ("_conn", "_prepare")

    def __init__(self, conn: Conn, prepare: bool) -> None:
        self._conn = conn
        self._prepare = prepare

    def execute(self, sql: str, args: Sequence[object] = ()) -> psycopg.Cursor[Any]:
        return self._conn.execute(sql, args, prepare=self._prepare)


class _PgTx(SqlTx):
    """The four primitives on one connection, inside the caller's pipelined transaction: a
    write goes out without waiting for its answer; its row count (the version check of an
    UPDATE, the ``ON CONFLICT DO NOTHING`` of an INSERT) is checked by :meth:`check` once
    the pipeline has synced, before COMMIT."""

    __slots__ = ("_unchecked",)
    tables = BY_KIND

    def __init__(self, conn: Conn, *, prepare: bool) -> None:
        super().__init__(_Prepared(conn, prepare))
        self._unchecked: list[tuple[psycopg.Cursor[Any], Callable[[], str]]] = []

    def _insert_row(
        self, table: SqlTable, args: tuple[object, ...], conflict: Callable[[], str]
    ) -> None:
        self._expect_one(self._conn.execute(table.insert, args), conflict)

    def _expect_one(self, cursor: Any, conflict: Callable[[], str]) -> None:
        self._unchecked.append((cursor, conflict))

    def check(self) -> None:
        """Raise the first write that touched no row as :class:`ConflictError` (call after a
        sync: every row count has arrived). Nothing is committed then: the caller rolls
        back, so a transaction with a failed check wrote nothing."""
        unchecked, self._unchecked = self._unchecked, []
        for cursor, conflict in unchecked:
            if cursor.rowcount != 1:
                raise ConflictError(conflict())


class _LostCommit(Exception):
    """The connection broke during COMMIT of transaction ``xid``."""

    def __init__(self, xid: str, cause: BaseException, result: object) -> None:
        super().__init__(xid)
        self.xid = xid
        self.cause = cause
        self.result = result


def _roll_back(conn: Conn) -> None:
    """End a transaction that failed, in whatever state it left the connection (a pipeline
    aborted, no transaction at all, or broken: then the pool replaces it)."""
    with contextlib.suppress(psycopg.Error):
        conn.rollback()


def _schema_version(conn: Conn) -> int | None:
    """The version the schema records, or None when it has no version table."""
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return None
    found = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(found[0] or 0) if found else 0


def migrate(url: str) -> tuple[int, int]:
    """Apply the migrations ``url``'s schema lacks; returns (version before, version after).
    Concurrent runs are serialised by an advisory lock, so each migration runs once."""
    settings = parse_pg_url(url)
    with psycopg.connect(settings.conninfo, autocommit=True) as conn:
        return _migrate_on(conn, settings)


def _migrate_on(conn: Conn, settings: PgSettings) -> tuple[int, int]:
    schema = quote_ident(settings.schema)
    with conn.transaction():
        # One migrator at a time per schema (a transaction-scoped lock: freed at COMMIT).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (settings.schema,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute(f"SET LOCAL search_path TO {schema}")
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        before = _schema_version(conn) or 0
        if before > len(MIGRATIONS):
            raise StoreError(
                f"PostgreSQL schema {settings.schema} at {settings.where} has fxdurable schema "
                f"version {before}, newer than this fxdurable understands ({len(MIGRATIONS)}): "
                "upgrade fxdurable"
            )
        for number, script in enumerate(MIGRATIONS[before:], start=before + 1):
            conn.execute(script.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
    return before, len(MIGRATIONS)


class PostgresStore:
    """``postgresql://user@host:port/db?schema=fxdurable`` (parameters: _pg_connect.py).

    ``session`` is a ``boto3.Session`` for a store with ``?bucket=`` to take credentials and
    the default region from (as the DynamoDB store's); by default boto3's own chain.
    """

    def __init__(self, url: str, *, create: bool = True, session: Any = None) -> None:
        self._settings = parse_pg_url(url)
        self.url = url
        self.where = f"{self._settings.where} schema {self._settings.schema}"
        self._rand = random.Random()
        self._backoff = contention_backoff(self._rand.random)
        self._pool = open_pool(self._settings, name=f"fxdurable-store-{self._settings.schema}")
        self._notifier: PgNotifier | None = None  # made on first use (notifier())
        self._notifier_lock = threading.Lock()
        try:
            self._check_schema(create=create)
            self._blobs = PgBlobs(self._settings.s3, self._short, self.where, session)
        except BaseException:
            self._pool.close()
            raise

    # -- connections and errors ---------------------------------------------------------

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Conn]:
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            stats = self._pool.get_stats()
            if stats["pool_size"] < stats["pool_max"]:
                raise _PoolUnreachable(
                    f"no connection to PostgreSQL at {self._settings.where} could be opened "
                    f"within pool_timeout_s={self._settings.pool_timeout_s}"
                ) from exc
            raise pool_exhausted(self._settings, exc) from exc

    def _lost(self, exc: BaseException, doing: str, lost: int) -> None:
        """Say (once per lost connection) that the store rides out a broken connection, so
        an operator sees the outage and its recovery in the log, not silence."""
        _log.warning(
            "PostgreSQL store %s: connection lost while %s (%s); retrying (%d of %d)",
            self.where,
            doing,
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            lost,
            _RECONNECTS,
        )

    def _unavailable(self, exc: BaseException, doing: str) -> StoreUnavailableError:
        if isinstance(exc, pg_errors.LockNotAvailable):
            return StoreUnavailableError(
                f"PostgreSQL store {self.where}: a lock stayed held by another session past "
                f"lock_timeout_ms={self._settings.lock_timeout_ms} while {doing} ({exc}): "
                "nothing was written; retry, or raise ?lock_timeout_ms= in the URL",
                where=self.where,
                cause=exc,
            )
        if isinstance(exc, pg_errors.QueryCanceled):
            return StoreUnavailableError(
                f"PostgreSQL store {self.where}: a statement ran past statement_timeout_ms="
                f"{self._settings.statement_timeout_ms} while {doing} ({exc}): nothing was "
                "written; retry, or raise ?statement_timeout_ms= in the URL",
                where=self.where,
                cause=exc,
            )
        return StoreUnavailableError(
            f"PostgreSQL store {self.where} failed while {doing} ({exc}): nothing was "
            "written; check the server, then retry",
            where=self.where,
            cause=exc,
        )

    def _check_schema(self, *, create: bool) -> None:
        with self._connection() as conn:
            version = _schema_version(conn)
            conn.rollback()
            if version is None and create:
                _migrate_on(conn, self._settings)
                return
        if version is None:
            raise StoreError(f"no fxdurable store in PostgreSQL {self.where}")
        if version < len(MIGRATIONS):
            raise SchemaOutdatedError(
                f"PostgreSQL {self.where} has fxdurable schema version {version}, this "
                f"fxdurable needs {len(MIGRATIONS)}: run `fxdurable migrate {self.url}`"
            )
        if version > len(MIGRATIONS):
            raise StoreError(
                f"PostgreSQL {self.where} has fxdurable schema version {version}, newer than "
                f"this fxdurable understands ({len(MIGRATIONS)}): upgrade fxdurable"
            )

    # -- transactions -------------------------------------------------------------------

    def transact(self, body: Callable[[Tx], T]) -> T:
        lost = 0

        def run(attempt: int) -> T:
            nonlocal lost
            try:
                return self._run_once(body)
            except pg_errors.SerializationFailure:
                raise Rerun() from None
            except pg_errors.DeadlockDetected:
                raise Rerun() from None
            except _LostCommit as exc:
                if self._committed(exc):
                    raise _Done(exc.result) from None
                lost += 1
                if lost > _RECONNECTS:
                    raise self._unavailable(exc.cause, "writing") from exc.cause
                raise Rerun(delay=0.05 * lost) from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if isinstance(exc, (pg_errors.LockNotAvailable, pg_errors.QueryCanceled)):
                    raise self._unavailable(exc, "writing") from exc
                lost += 1  # the connection broke before COMMIT: nothing was written
                if lost > _RECONNECTS:
                    raise self._unavailable(exc, "writing") from exc
                self._lost(exc, "writing", lost)
                raise Rerun(delay=0.05 * lost) from None

        try:
            return optimistic(
                run, attempts=_ATTEMPTS, backoff=self._backoff, what=f"PostgreSQL {self.where}"
            )
        except _Done as done:
            return cast(T, done.result)  # what this call's body returned

    def _run_once(self, body: Callable[[Tx], T]) -> T:
        """One try of ``body`` in one transaction, pipelined (psycopg's pipeline mode): the
        BEGIN, the transaction id and every write go out without waiting; a read waits for
        its own answer (and takes everything sent before it along); the writes' row counts
        are checked when the pipeline syncs, then COMMIT goes alone, so that its lost answer
        is told apart from everything before it. A write-only transaction is two round
        trips: its statements, then COMMIT."""
        with self._connection() as conn:
            tx = _PgTx(conn, prepare=self._settings.prepared)
            failed: BaseException | None = None
            try:
                with conn.pipeline():  # its end syncs: every answer has arrived after it
                    conn.execute(b"BEGIN ISOLATION LEVEL SERIALIZABLE")
                    xid_cursor = conn.execute(b"SELECT pg_current_xact_id()::text")
                    try:
                        result = body(tx)
                        refuse_awaitable(result)
                    except psycopg.Error:
                        raise
                    except BaseException as exc:
                        failed = exc
                if failed is not None:
                    # A write the body made may have missed (a version moved): that
                    # conflict, not what the body then met, is what the caller meets.
                    try:
                        tx.check()
                    except ConflictError as conflict:
                        raise conflict from failed
                    raise failed
                tx.check()
                row = xid_cursor.fetchone()
                xid = str(row[0]) if row else ""
            except BaseException:
                _roll_back(conn)
                raise
            try:
                conn.execute(b"COMMIT")
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if conn.broken or conn.closed:
                    raise _LostCommit(xid, exc, result) from exc
                raise
            return result

    def _committed(self, lost: _LostCommit) -> bool:
        """Whether the transaction whose COMMIT response was lost committed: asked of the
        server on another connection, waiting while it is still in progress."""
        deadline = time.monotonic() + _XACT_WAIT_S + self._settings.pool_timeout_s
        while True:
            try:
                with self._connection() as conn:
                    row = conn.execute("SELECT pg_xact_status(%s::xid8)", (lost.xid,)).fetchone()
                    conn.rollback()
            except (psycopg.OperationalError, psycopg.InterfaceError, PoolExhaustedError):
                # No connection to ask on (the pool could not open one in pool_timeout_s: the
                # server is away) is no answer either: keep asking until the deadline, then
                # say the outcome is unknown, never what the pool's error would say.
                status = "unreachable"
            else:
                status = str(row[0]) if row and row[0] is not None else "aborted"
            if status == "committed":
                return True
            if status == "aborted":
                return False
            if time.monotonic() >= deadline:
                raise StoreUnavailableError(
                    f"PostgreSQL store {self.where}: the connection broke during COMMIT and "
                    f"the transaction's outcome ({status}) could not be learnt: it may or may "
                    "not have been applied; read before retrying",
                    where=self.where,
                    cause=lost.cause,
                )
            time.sleep(0.05)  # a server restarting, or a backend still committing

    def read(self, body: Callable[[ReadView], T]) -> T:
        def once(conn: Conn) -> T:
            # Pipelined as a write is: the BEGIN goes with the body's first read. COMMIT,
            # not ROLLBACK, ends it (the same for a read-only transaction): psycopg forgets
            # every prepared statement at a ROLLBACK.
            try:
                with conn.pipeline():
                    conn.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    result = body(_PgTx(conn, prepare=self._settings.prepared))
                    conn.execute(b"COMMIT")
            except BaseException:
                _roll_back(conn)
                raise
            return result

        return self._reconnecting(once, "reading")

    def _reconnecting(self, once: Callable[[Conn], R], doing: str) -> R:
        """``once`` on a pooled connection, again on a new one after a lost connection (each
        caller's ``once`` is a read or idempotent), up to ``_RECONNECTS`` times."""
        for lost in range(_RECONNECTS + 1):
            try:
                with self._connection() as conn:
                    return once(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if lost == _RECONNECTS or isinstance(
                    exc, (pg_errors.LockNotAvailable, pg_errors.QueryCanceled)
                ):
                    raise self._unavailable(exc, doing) from exc
                self._lost(exc, doing, lost + 1)
                time.sleep(0.05 * (lost + 1))
        raise AssertionError("unreachable")

    # -- blobs (in the table, large ones in S3 with ?bucket=: _pg_blobs.py) ---------------

    def put_blob(self, data: bytes) -> str:
        return self._blobs.put(data)

    def get_blob(self, digest: str) -> bytes | None:
        return self._blobs.get(digest)

    def delete_blob(self, digest: str) -> None:
        self._blobs.delete(digest)

    def blob_digests(self) -> Iterator[str]:
        return self._blobs.digests()

    def _short(self, body: Callable[[Conn], None], doing: str) -> None:
        """One short autocommit-style transaction, retried on a lost connection (each use
        here is idempotent)."""

        def once(conn: Conn) -> None:
            try:
                body(conn)
                conn.commit()
            except BaseException:
                _roll_back(conn)
                raise

        self._reconnecting(once, doing)

    def notifier(self) -> PgNotifier:
        """Aborts and steers reach the lease holder by LISTEN/NOTIFY (core/notify.py)."""
        with self._notifier_lock:
            if self._notifier is None:
                self._notifier = PgNotifier(self._settings, self._pool)
            return self._notifier

    def close(self) -> None:
        if self._notifier is not None:
            self._notifier.stop()  # before the pool: its stop push takes a connection
        self._pool.close()
        self._blobs.close()


class _Done(BaseException):
    """A lost COMMIT that did commit: carries the body's result out of the retry loop."""

    def __init__(self, result: object) -> None:
        super().__init__()
        self.result = result
