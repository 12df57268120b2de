"""Redis pub/sub for :mod:`fxdurable.core.notify`: an abort or a steer reaches the lease
holder's process within a round trip, wherever it runs.

One channel per key prefix (``<prefix>:interrupts``), the session id as the message: a
committed abort or steer is ``PUBLISH``-ed by the process that recorded it, and each process
that watches a session runs one subscriber thread (one connection; the loop, its backoff and
what a reconnect may have missed: :mod:`fxdurable.core.notify_push`) that wakes its watchers
of the named session.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import redis

from fxdurable.core.notify_push import PushingNotifier, Receive

__all__ = ["RedisNotifier"]

_CONFIRM_S = 5.0


class RedisNotifier(PushingNotifier):
    thread_name = "fxd-redis-interrupts"

    def __init__(
        self, pool: redis.ConnectionPool, prefix: str, written: Callable[[str | None], None]
    ) -> None:
        # ``written``: the store's caches stop trusting what they hold of that session
        # unchecked (a holder's read after its own commit), so the woken watcher's read is
        # checked against the server and sees the write the push announces.
        super().__init__(written)
        self._pool = pool
        self.channel = f"{prefix}:interrupts"

    def _publish(self, session_id: str) -> None:
        redis.Redis(connection_pool=self._pool).publish(self.channel, session_id)

    @contextlib.contextmanager
    def _subscribe(self) -> Iterator[Receive]:
        pubsub = redis.Redis(connection_pool=self._pool).pubsub()  # type: ignore[no-untyped-call]
        try:
            pubsub.subscribe(self.channel)
            # Listening only once the server confirms: the base then wakes every watcher to
            # read, and a push in between would otherwise be neither received nor read.
            deadline = time.monotonic() + _CONFIRM_S
            while (reply := pubsub.get_message(timeout=0.1)) is None or reply[
                "type"
            ] != "subscribe":
                if time.monotonic() > deadline:
                    raise redis.TimeoutError(f"no SUBSCRIBE confirmation in {_CONFIRM_S} s")

            def receive(timeout: float) -> list[str]:
                message = pubsub.get_message(timeout=timeout)
                if message is None or message.get("type") != "message":
                    return []
                data = message["data"]
                return [data.decode() if isinstance(data, bytes) else str(data)]

            yield receive
        finally:
            pubsub.close()
