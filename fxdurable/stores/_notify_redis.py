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
import uuid
from collections.abc import Callable, Iterator

import redis

from fxdurable.core.notify_push import PushingNotifier, Receive

__all__ = ["RedisNotifier"]

_CONFIRM_S = 5.0


class RedisNotifier(PushingNotifier):
    thread_name = "fxd-redis-interrupts"
    receive_s = 5.0  # stop() ends a wait at once (_interrupt): a long one costs nothing

    def __init__(
        self, pool: redis.ConnectionPool, prefix: str, written: Callable[[str | None], None]
    ) -> None:
        # ``written``: the store's caches stop trusting what they hold of that session
        # unchecked (a holder's read after its own commit), so the woken watcher's read is
        # checked against the server and sees the write the push announces.
        super().__init__(written)
        self._pool = pool
        self.channel = f"{prefix}:interrupts"
        # A channel of this notifier's own, for stop(): the subscriber's wait ends at once
        # (a store's close waited out a receive, 0.5 s, before), without waking every other
        # process's subscriber of the prefix.
        self._own_channel = f"{prefix}:stop:{uuid.uuid4().hex}"

    def _publish(self, session_id: str) -> None:
        redis.Redis(connection_pool=self._pool).publish(self.channel, session_id)

    def _interrupt(self) -> None:
        redis.Redis(connection_pool=self._pool).publish(self._own_channel, "")

    @contextlib.contextmanager
    def _subscribe(self) -> Iterator[Receive]:
        # Untyped before redis 8.2, typed since: the ignore holds for either.
        pubsub = redis.Redis(connection_pool=self._pool).pubsub()  # type: ignore[no-untyped-call,unused-ignore]
        try:
            pubsub.subscribe(self.channel, self._own_channel)
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
                if _text(message["channel"]) != self.channel:
                    return []  # stop()'s push: the loop sees the stop at once
                return [_text(message["data"])]

            yield receive
        finally:
            pubsub.close()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
