"""The subscriber loop every pushing :class:`~fxdurable.core.notify.Notifier` shares.

A backend that pushes (Redis pub/sub, Postgres LISTEN/NOTIFY) fills two primitives — open a
subscription, and publish — and this base owns the rest: one subscriber thread per notifier,
started by the first watch, resubscribing with backoff when its connection drops, and stopped
with the store.

A push is fire-and-forget: one sent while this process was not subscribed never arrives.
So each time a dropped subscription is made again, the base treats every session as written
meanwhile — the backend's ``written`` hook hears ``None`` (its caches stop serving any read
unchecked) and every watcher in this process is woken to read once. A push lost to a
reconnect then costs one read per watched session instead of the watchers' ``fallback_s``.
The first subscription does not: it begins with the first watch, and a push in the moments
before it listens (an abort of a call that has only just started) is read by the watcher's
fallback, as before; doing the catch-up there too would cost every process's first steps a
checked read for a window of milliseconds.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager as ContextManager

from fxdurable.core.notify import Notifier, wake_all_watchers, wake_watchers

__all__ = ["PushingNotifier", "Receive"]

log = logging.getLogger("fxdurable.store")

# Waits up to the given seconds for pushes; returns the session ids pushed (maybe none).
Receive = Callable[[float], Iterable[str]]

_RESUBSCRIBE_S = (0.1, 2.0)  # backoff after a lost subscriber connection: first, at most


class PushingNotifier(Notifier):
    """A notifier whose subscriber thread receives other processes' pushes.

    ``written``: told first of each push, with the session id (``None``: any session may have
    been written unannounced), before the watchers wake — a store that serves some reads
    from memory unchecked drops them, so the woken watcher's read sees the write.
    ``receive_s``: the longest a receive waits, so the thread sees :meth:`stop` within it
    (a backend whose :meth:`_interrupt` ends a receive at once may wait longer)."""

    pushes = True
    thread_name = "fxd-interrupts"
    receive_s = 0.5

    def __init__(self, written: Callable[[str | None], None] | None = None) -> None:
        self._written = written
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.subscribed = threading.Event()  # the subscriber listens (tests wait on it)
        self.subscriptions = 0  # how many times it (re)subscribed: reconnect tests read it

    # -- what a backend fills ----------------------------------------------------------------

    def _subscribe(self) -> ContextManager[Receive]:
        """Connect and subscribe; the context yields the receive call and closes it all."""
        raise NotImplementedError

    def _interrupt(self) -> None:
        """End a receive in progress at once (:meth:`stop`); the default waits it out."""

    # -- the loop -----------------------------------------------------------------------------

    def opened(self, session_id: str) -> None:
        with self._lock:
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._listen, name=self.thread_name, daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """End the subscriber thread and its connection (the store closes)."""
        self._stopped.set()
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        with contextlib.suppress(Exception):
            self._interrupt()
        thread.join(timeout=self.receive_s + 1)

    def _listen(self) -> None:
        pause = _RESUBSCRIBE_S[0]
        while not self._stopped.is_set():
            try:
                with self._subscribe() as receive:
                    pause = _RESUBSCRIBE_S[0]
                    if self.subscriptions:
                        # What was pushed while the connection was down is lost: every watcher
                        # reads once. Before ``subscribed`` is set, so that any wake after it
                        # is a push.
                        self._pushed(None)
                    self.subscriptions += 1
                    self.subscribed.set()
                    while not self._stopped.is_set():
                        for session_id in receive(self.receive_s):
                            if self._stopped.is_set():
                                break
                            self._pushed(session_id)
            except Exception as exc:  # a dropped connection: resubscribe, with backoff
                log.debug("%s subscriber: %s; resubscribing", self.thread_name, exc)
                self._stopped.wait(pause)
                pause = min(pause * 2, _RESUBSCRIBE_S[1])
            finally:
                self.subscribed.clear()

    def _pushed(self, session_id: str | None) -> None:
        if self._written is not None:
            self._written(session_id)
        if session_id is None:
            wake_all_watchers()
        else:
            wake_watchers(session_id)
