"""PostgreSQL LISTEN/NOTIFY for :mod:`fxdurable.core.notify`: an abort or a steer reaches the
lease holder's process within a round trip, wherever it runs.

One channel per store schema (``fxd_interrupts_<schema>``: NOTIFY channels are database-wide,
so two deployments on one database do not wake each other's holders), the session id as the
payload. A committed abort or steer is ``pg_notify``-ed by the process that recorded it, on a
pooled connection in autocommit (after the journal's transaction committed: a notification
sent inside it would be delivered at the same commit, but the protocol publishes after the
commit for every backend alike). Each process that watches a session runs one subscriber
thread on a connection of its own (LISTEN needs a session: not a pooled one, and not through
pgbouncer in transaction mode) that wakes its watchers of the named session.

A notification is a hint: one sent while the subscriber reconnects is lost, which costs
latency only, since the watcher also reads every ``fallback_s`` while a call runs, and the
heartbeat and the step boundary read the same records. The Postgres store caches nothing, so
unlike Redis's there is no cached read to invalidate before waking a watcher.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import uuid
from typing import TYPE_CHECKING

from fxdurable.core.notify import Notifier, wake_watchers
from fxdurable.stores._pg_connect import PgSettings

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PgNotifier", "interrupt_channel"]

log = logging.getLogger("fxdurable.store")

_MAX_IDENT = 63  # NAMEDATALEN - 1: a longer channel name is refused by pg_notify
_RESUBSCRIBE_S = (0.1, 2.0)  # backoff after a lost subscriber connection: first, at most
_POLL_S = 5.0  # the subscriber's longest wait between looks at its stop flag (stop() wakes it)


def interrupt_channel(schema: str) -> str:
    """The NOTIFY channel of ``schema``'s interrupts (a digest when the name would pass the
    63-byte identifier limit; a schema name is already a plain identifier)."""
    channel = f"fxd_interrupts_{schema}"
    if len(channel) <= _MAX_IDENT:
        return channel
    return "fxd_interrupts_" + hashlib.sha256(schema.encode()).hexdigest()[:32]


class PgNotifier(Notifier):
    pushes = True

    def __init__(
        self,
        settings: PgSettings,
        pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]],
    ) -> None:
        self._settings = settings
        self._pool = pool
        self.channel = interrupt_channel(settings.schema)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._subscribed = threading.Event()  # the subscriber listens (tests wait on it)
        self.subscriptions = 0  # how many times it (re)subscribed: reconnect tests read it
        # A channel of this notifier's own, for stop(): the subscriber's wait ends at once
        # without waking every other process's subscriber of the schema.
        self._own_channel = f"fxd_stop_{uuid.uuid4().hex}"

    def _publish(self, session_id: str) -> None:
        # Autocommit (open_pool): sent at once. A short wait: the abort is durable already,
        # and a push stuck behind an exhausted pool would only delay the recording caller.
        with self._pool.connection(timeout=2) as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (self.channel, session_id))

    def opened(self, session_id: str) -> None:
        with self._lock:
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._listen, name="fxd-pg-interrupts", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """End the subscriber thread and its connection (the store closes)."""
        self._stopped.set()
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        # Without this push the subscriber still sees the flag within _POLL_S.
        with contextlib.suppress(Exception), self._pool.connection(timeout=1) as conn:
            conn.execute("SELECT pg_notify(%s, '')", (self._own_channel,))
        thread.join(timeout=_POLL_S + 1)

    def _listen(self) -> None:
        import psycopg

        pause = _RESUBSCRIBE_S[0]
        while not self._stopped.is_set():
            try:
                with psycopg.connect(
                    self._settings.conninfo,
                    autocommit=True,
                    application_name="fxdurable-interrupts",
                ) as conn:
                    conn.execute(f'LISTEN "{self.channel}"; LISTEN "{self._own_channel}"')
                    self.subscriptions += 1
                    self._subscribed.set()
                    pause = _RESUBSCRIBE_S[0]
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=_POLL_S):
                            if self._stopped.is_set():
                                break  # stop()'s push: notifies() would wait out its timeout
                            if note.channel == self.channel:
                                wake_watchers(note.payload)
            except Exception as exc:  # a dropped connection: resubscribe, with backoff
                log.debug("postgres interrupt subscriber: %s; resubscribing", exc)
                self._stopped.wait(pause)
                pause = min(pause * 2, _RESUBSCRIBE_S[1])
            finally:
                self._subscribed.clear()
