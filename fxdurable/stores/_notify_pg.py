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

A notification is a hint: one sent while the subscriber reconnects is lost, so each
subscription wakes every watcher to read once (the loop: :mod:`fxdurable.core.notify_push`).
The Postgres store caches nothing, so unlike Redis's there is no cached read to invalidate
before waking a watcher.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fxdurable.core.notify_push import PushingNotifier, Receive
from fxdurable.stores._pg_connect import PgSettings

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PgNotifier", "interrupt_channel"]

_MAX_IDENT = 63  # NAMEDATALEN - 1: a longer channel name is refused by pg_notify


def interrupt_channel(schema: str) -> str:
    """The NOTIFY channel of ``schema``'s interrupts (a digest when the name would pass the
    63-byte identifier limit; a schema name is already a plain identifier)."""
    channel = f"fxd_interrupts_{schema}"
    if len(channel) <= _MAX_IDENT:
        return channel
    return "fxd_interrupts_" + hashlib.sha256(schema.encode()).hexdigest()[:32]


class PgNotifier(PushingNotifier):
    thread_name = "fxd-pg-interrupts"
    receive_s = 5.0  # stop() ends a wait at once (_interrupt): a long one costs nothing

    def __init__(
        self,
        settings: PgSettings,
        pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]],
    ) -> None:
        super().__init__()  # the store caches nothing: nothing to tell before a wake
        self._settings = settings
        self._pool = pool
        self.channel = interrupt_channel(settings.schema)
        # A channel of this notifier's own, for stop(): the subscriber's wait ends at once
        # without waking every other process's subscriber of the schema.
        self._own_channel = f"fxd_stop_{uuid.uuid4().hex}"

    def _publish(self, session_id: str) -> None:
        # Autocommit (open_pool): sent at once. A short wait: the abort is durable already,
        # and a push stuck behind an exhausted pool would only delay the recording caller.
        with self._pool.connection(timeout=2) as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (self.channel, session_id))

    def _interrupt(self) -> None:
        with self._pool.connection(timeout=1) as conn:
            conn.execute("SELECT pg_notify(%s, '')", (self._own_channel,))

    @contextlib.contextmanager
    def _subscribe(self) -> Iterator[Receive]:
        import psycopg

        with psycopg.connect(
            self._settings.conninfo, autocommit=True, application_name="fxdurable-interrupts"
        ) as conn:
            # In autocommit LISTEN holds once it returns: no push after this is missed.
            conn.execute(f'LISTEN "{self.channel}"; LISTEN "{self._own_channel}"')

            def receive(timeout: float) -> Iterator[str]:
                for note in conn.notifies(timeout=timeout):
                    if note.channel != self.channel:
                        return  # stop()'s push: notifies() would wait out its timeout
                    yield note.payload

            yield receive
