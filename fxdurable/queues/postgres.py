"""The PostgreSQL wake queue: a table of wakes, claimed with ``FOR UPDATE SKIP LOCKED``,
waiting workers woken by ``LISTEN/NOTIFY``.

``postgresql://user@host:port/db?schema=fxdurable&max_deliveries=3``. Needs
``pip install 'fxdurable[postgres]'``; :mod:`fxdurable.backends` imports this module (and
psycopg) only when a ``postgresql://`` queue URL is opened.

**A wake** is a row ``(session_id, reason, traceparent, run_at, deliveries, claim)``. Enqueue
is an upsert on the partial unique index over unclaimed rows, keeping the earliest ``run_at``:
a session has at most one pending wake, and a wake for a session whose wake is being handled
is kept as a second row (the handler may have read the store before the new work landed).
The same transaction sends ``NOTIFY fxd_wake_<schema>``, delivered at its commit.

**Delayed wakes** set ``run_at = now() + delay`` on the database's clock, so every worker
agrees when a wake is due; ``delays_wakes`` is True.

**Claiming** (:class:`PgConsumer`) marks up to N due rows with a fresh claim token, counts the
delivery, and moves their ``run_at`` to the end of a visibility lease; the worker extends
the lease while the turn runs and deletes the row (by id and token) when it is done. A
SIGKILLed worker's row becomes due again when its lease lapses, and is delivered again. A due
row already delivered ``max_deliveries`` times is marked dead instead (kept for an operator:
``SELECT * FROM <schema>.fxd_wakes WHERE dead``); the reconciliation scan still finds the
session's work in the store.

**Waiting** is ``LISTEN``: an idle consumer blocks on its connection until a notification or
the next delayed wake's ``run_at``, whichever comes first, and at most ``wait_s`` (a slow
safety poll that only matters after a reconnect lost a notification). No polling floor.

**Errors.** A lost or refused connection is :class:`~fxdurable.errors.QueueUnavailableError`
(the connection is dropped; the next call reconnects and LISTENs again); any other database
refusal a :class:`~fxdurable.errors.QueueError`. Messages name the queue, never a password.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from fxdurable.core import tracecontext
from fxdurable.errors import QueueError, QueueUnavailableError
from fxdurable.queues._pg_queue_schema import PgQueueSettings, connect, migrate, parse_pg_queue_url
from fxdurable.queues.wake_codec import encode_wake  # the body the worker loop decodes

__all__ = ["PgConsumer", "PgMessage", "PgQueue"]

_ENQUEUE = """
INSERT INTO {s}.fxd_wakes (session_id, reason, traceparent, run_at)
VALUES (%(session)s, %(reason)s, %(tp)s, now() + make_interval(secs => %(delay)s))
ON CONFLICT (session_id) WHERE claim IS NULL AND NOT dead
DO UPDATE SET run_at = LEAST({s}.fxd_wakes.run_at, EXCLUDED.run_at)
"""
_DEAD_LETTER = """
UPDATE {s}.fxd_wakes SET dead = true WHERE id IN (
    SELECT id FROM {s}.fxd_wakes
    WHERE NOT dead AND run_at <= now() AND deliveries >= %(max)s
    FOR UPDATE SKIP LOCKED)
RETURNING session_id, deliveries
"""
_CLAIM = """
WITH due AS (
    SELECT id FROM {s}.fxd_wakes
    WHERE NOT dead AND run_at <= now() AND deliveries < %(max)s
    ORDER BY run_at LIMIT %(n)s
    FOR UPDATE SKIP LOCKED)
UPDATE {s}.fxd_wakes w
SET claim = gen_random_uuid(), deliveries = w.deliveries + 1,
    run_at = now() + make_interval(secs => %(vis)s)
FROM due WHERE w.id = due.id
RETURNING w.id, w.session_id, w.reason, w.traceparent, w.claim, w.deliveries
"""
_NEXT_DUE = "SELECT extract(epoch FROM min(run_at) - now()) FROM {s}.fxd_wakes WHERE NOT dead"


@contextlib.contextmanager
def _mapped(where: str, action: str) -> Iterator[None]:
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise QueueUnavailableError(
            f"the Postgres queue {where} is unavailable ({action}): {exc}".strip(), url=where
        ) from exc
    except psycopg.Error as exc:
        raise QueueError(f"the Postgres queue {where} refused {action}: {exc}") from exc


class _Connection:
    """One lazily (re)opened connection, migrated on first open, used under a lock."""

    def __init__(self, settings: PgQueueSettings, *, listen: Sequence[str] = ()) -> None:
        self._settings = settings
        self._listen = tuple(listen)
        self._conn: Any = None
        self.lock = threading.Lock()
        self.opened = 0  # how many times it was (re)connected: reconnect tests read it

    def get(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = connect(self._settings)
            try:
                migrate(conn, self._settings.schema)
                for channel in self._listen:
                    conn.execute(f'LISTEN "{channel}"')
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self.opened += 1
        return self._conn

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def use(self, action: str) -> Iterator[Any]:
        with self.lock, _mapped(self._settings.where, action):
            try:
                yield self.get()
            except (psycopg.OperationalError, psycopg.InterfaceError):
                self.drop()  # the next call reconnects (and LISTENs again)
                raise


class PgQueue:
    """The sending side: ``enqueue`` (async, for the runtime) and ``send_now`` (for scans)."""

    delays_wakes = True

    def __init__(self, url: str) -> None:
        self.settings = parse_pg_queue_url(url)
        self.url = self.settings.where
        self._conn = _Connection(self.settings)
        s = f'"{self.settings.schema}"'
        self._enqueue_sql = _ENQUEUE.format(s=s)

    async def enqueue(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        trace_parent = tracecontext.current_traceparent()
        await asyncio.to_thread(self._send, session_id, reason, trace_parent, delay_s)

    def send_now(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        self._send(session_id, reason, tracecontext.current_traceparent(), delay_s)

    def _send(self, session_id: str, reason: str, trace_parent: str | None, delay_s: float) -> None:
        params = {
            "session": session_id,
            "reason": reason,
            "tp": trace_parent,
            "delay": max(0.0, float(delay_s)),
        }
        for attempt in (1, 2):
            opened = self._conn.opened
            try:
                with self._conn.use("a wake") as conn, conn.transaction():
                    conn.execute(self._enqueue_sql, params)
                    conn.execute("SELECT pg_notify(%s, '')", (self.settings.channel,))
                return
            except QueueUnavailableError:
                # A connection that went stale while idle (a server restart, an idle
                # timeout) gets one fresh try; a fresh one failing is the answer. Sending
                # twice is harmless: the upsert keeps one pending wake.
                if attempt == 2 or self._conn.opened != opened or opened == 0:
                    raise

    def close(self) -> None:
        with self._conn.lock:
            self._conn.drop()

    async def aclose(self) -> None:
        self.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class PgMessage:
    """A claimed wake, in the shape the queue worker loop reads
    (:class:`fxdurable.workers.queue_worker.QueueMessage`)."""

    message_id: str
    body: str
    receipt_handle: str  # the claim token: extend and delete only while it is ours
    receive_count: int  # deliveries, this one included


class PgConsumer:
    """Claims, extends and deletes wakes. ``receive`` blocks on LISTEN while nothing is due;
    ``extend``/``delete`` use a second connection, so they never wait behind a blocked
    ``receive`` in another thread."""

    def __init__(self, queue: PgQueue, *, wait_s: float) -> None:
        self._settings = queue.settings
        self.wait_s = wait_s
        # A channel of this consumer's own, for interrupt(): a stopping worker ends its wait
        # at once without waking every other worker of the schema.
        self._own_channel = f"{self._settings.channel}_{uuid.uuid4().hex[:12]}"
        self.listener = _Connection(
            self._settings, listen=(self._settings.channel, self._own_channel)
        )
        self._ops = _Connection(self._settings)
        s = f'"{self._settings.schema}"'
        self._sql = {k: v.format(s=s) for k, v in _SQL.items()}
        self.dead_lettered: list[tuple[str, int]] = []  # (session, deliveries), for logs/tests

    @property
    def where(self) -> str:
        return self._settings.where

    def redrive_max_receives(self) -> int:
        return self._settings.max_deliveries

    def receive(self, max_messages: int, *, visibility_s: int) -> list[PgMessage]:
        """Claim up to ``max_messages`` due wakes; if none, wait for a NOTIFY (or the next
        delayed wake, or ``wait_s``) and try once more."""
        with self.listener.use("receiving wakes") as conn:
            messages = self._claim(conn, max_messages, visibility_s)
            if messages:
                return messages
            row = conn.execute(self._sql["next_due"]).fetchone()
            wait = self.wait_s
            if row is not None and row[0] is not None:
                wait = max(0.0, min(wait, float(row[0])))
            if wait > 0:
                # Notifications that arrived before this point are already queued on the
                # connection; ``notifies`` yields them at once.
                for _ in conn.notifies(timeout=wait, stop_after=1):
                    pass
            return self._claim(conn, max_messages, visibility_s)

    def _claim(self, conn: Any, n: int, visibility_s: int) -> list[PgMessage]:
        limits = {"max": self._settings.max_deliveries, "n": n, "vis": visibility_s}
        with conn.transaction():
            dead = conn.execute(self._sql["dead"], limits).fetchall()
            rows = conn.execute(self._sql["claim"], limits).fetchall()
        self.dead_lettered.extend((r[0], r[1]) for r in dead)
        return [
            PgMessage(
                message_id=str(r[0]),
                body=encode_wake(r[1], r[2], r[3]),
                receipt_handle=str(r[4]),
                receive_count=r[5],
            )
            for r in rows
        ]

    def extend(self, message: PgMessage, visibility_s: int) -> bool:
        """Move the claimed wake's ``run_at`` to ``visibility_s`` from now (0: due again at
        once); False if the claim is no longer ours."""
        params = (visibility_s, int(message.message_id), message.receipt_handle)
        with self._ops.use("extending a wake") as conn:
            return bool(conn.execute(self._sql["extend"], params).rowcount)

    def delete(self, message: PgMessage) -> bool:
        params = (int(message.message_id), message.receipt_handle)
        with self._ops.use("deleting a wake") as conn:
            return bool(conn.execute(self._sql["delete"], params).rowcount)

    def interrupt(self) -> None:
        """End a ``receive`` blocked on LISTEN now (it returns what it can claim)."""
        with self._ops.use("interrupting a wait") as conn:
            conn.execute("SELECT pg_notify(%s, 'stop')", (self._own_channel,))

    def close(self) -> None:
        for c in (self.listener, self._ops):
            c.drop()


_SQL = {
    "dead": _DEAD_LETTER,
    "claim": _CLAIM,
    "next_due": _NEXT_DUE,
    "extend": "UPDATE {s}.fxd_wakes SET run_at = now() + make_interval(secs => %s) "
    "WHERE id = %s AND claim = %s AND NOT dead",
    "delete": "DELETE FROM {s}.fxd_wakes WHERE id = %s AND claim = %s",
}
