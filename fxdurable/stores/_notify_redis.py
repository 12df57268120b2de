"""Redis pub/sub for :mod:`fxdurable.core.notify`: an abort or a steer reaches the lease
holder's process within a round trip, wherever it runs.

One channel per key prefix (``<prefix>:interrupts``), the session id as the message: a
committed abort or steer is ``PUBLISH``-ed by the process that recorded it, and each process
that watches a session runs one subscriber thread (one connection) that wakes its watchers
of the named session. Pub/sub is fire-and-forget: a message lost while the subscriber
reconnects costs latency only, since the watcher also reads every ``fallback_s`` while a call
runs, and the heartbeat and the step boundary read the same records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from fxdurable.core.notify import Notifier, wake_watchers

__all__ = ["RedisNotifier"]

log = logging.getLogger("fxdurable.store")


class RedisNotifier(Notifier):
    pushes = True

    def __init__(
        self, pool: redis.ConnectionPool, prefix: str, written: Callable[[str], None]
    ) -> None:
        self._pool = pool
        # Told first of each push: the store stops trusting what it holds of that session
        # unchecked (a holder's read after its own commit), so the woken watcher's read is
        # checked against the server and sees the write the push announces.
        self._written = written
        self.channel = f"{prefix}:interrupts"
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._subscribed = threading.Event()  # the subscriber listens (tests wait on it)

    def _publish(self, session_id: str) -> None:
        redis.Redis(connection_pool=self._pool).publish(self.channel, session_id)

    def opened(self, session_id: str) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._listen, name="fxd-redis-interrupts", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """End the subscriber thread (the store closes)."""
        self._stopped.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _listen(self) -> None:
        pause = 0.1
        while not self._stopped.is_set():
            try:
                pubsub = redis.Redis(connection_pool=self._pool).pubsub(  # type: ignore[no-untyped-call]
                    ignore_subscribe_messages=True
                )
                try:
                    pubsub.subscribe(self.channel)
                    self._subscribed.set()
                    pause = 0.1
                    while not self._stopped.is_set():
                        message = pubsub.get_message(timeout=0.5)
                        if message is not None and message.get("type") == "message":
                            data = message["data"]
                            sid = data.decode() if isinstance(data, bytes) else str(data)
                            self._written(sid)
                            wake_watchers(sid)
                finally:
                    self._subscribed.clear()
                    pubsub.close()
            except Exception as exc:  # a dropped connection: resubscribe, with backoff
                log.debug("redis interrupt subscriber: %s; resubscribing", exc)
                time.sleep(pause)
                pause = min(pause * 2, 2.0)
