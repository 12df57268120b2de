"""Telling the lease holder, now, that its session was aborted or steered.

An abort or a steer is a durable record first (the journal's ``request_abort`` / ``steer``);
the holder acts on it once it reads it. Without a push that read happens only at the next
step boundary or heartbeat (up to ``heartbeat_s``, 5 s by default). A :class:`Notifier` makes
the holder look at once:

- in the process that recorded it, always: :meth:`Notifier.publish` calls every watcher of
  the session in this process (:func:`wake_watchers`, thread-safe, no I/O);
- across processes, by the store's own means: a backend overrides :meth:`Notifier._publish`,
  and its subscriber calls :func:`wake_watchers` for each push it receives (Redis pub/sub,
  Postgres LISTEN/NOTIFY), opened and closed with the watch (:meth:`Notifier.opened`,
  :meth:`Notifier.closed`); without one the watcher polls the store every
  :attr:`Notifier.poll_s` while a tool or model call runs (SQLite, DynamoDB).

A notification is only a hint to read: the watcher re-reads the records before acting, so a
lost, late or spurious one changes nothing but latency (DESIGN §5: the records decide). The
watch loop itself is the runtime's (:mod:`fxdurable.runtime.interrupts`); this module is
synchronous, like the rest of the core.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

__all__ = [
    "Notifier",
    "NotifyingStore",
    "notifier_of",
    "publish",
    "wake_all_watchers",
    "wake_watchers",
    "watching",
]

# session id -> the wake-up callbacks of every watcher of it in this process.
_watchers: dict[str, set[Callable[[], None]]] = {}
_lock = threading.Lock()


def wake_watchers(session_id: str) -> None:
    """Wake this process's watchers of ``session_id`` (callable from any thread: a pushing
    backend's subscriber calls it for each push it receives)."""
    with _lock:
        targets = list(_watchers.get(session_id, ()))
    for wake in targets:
        with contextlib.suppress(Exception):  # a watcher whose loop closed: it is gone
            wake()


def wake_all_watchers() -> None:
    """Wake every watcher in this process: a pushing backend's subscriber that may have
    missed pushes (it was not listening) makes each watcher read once."""
    with _lock:
        targets = [wake for wakes in _watchers.values() for wake in wakes]
    for wake in targets:
        with contextlib.suppress(Exception):
            wake()


@contextlib.contextmanager
def watching(session_id: str, wake: Callable[[], None]) -> Iterator[None]:
    """Register ``wake`` (thread-safe, non-blocking) as a watcher of ``session_id``."""
    with _lock:
        _watchers.setdefault(session_id, set()).add(wake)
    try:
        yield
    finally:
        with _lock:
            watchers = _watchers.get(session_id)
            if watchers is not None:
                watchers.discard(wake)
                if not watchers:
                    del _watchers[session_id]


class Notifier:
    """The polling default, and the base of pushing backends.

    ``poll_s``: how often a watcher reads the store while a call runs, when nothing pushes
    (150 ms: an abort lands well within the 500 ms target, and a call shorter than that costs
    no read at all). A backend that pushes sets ``pushes = True``; its watchers then read only
    on a push, or every ``fallback_s`` while a call runs (a pub/sub message is
    fire-and-forget)."""

    poll_s: float = 0.15
    fallback_s: float = 2.0
    pushes: bool = False

    @property
    def period_s(self) -> float:
        """How long a watcher waits between reads while a call runs."""
        return self.fallback_s if self.pushes else self.poll_s

    def publish(self, session_id: str) -> None:
        """After a committed abort or steer: wake the holder, here and elsewhere. Never
        raises: the record is durable, and the holder reads it at its next beat anyway."""
        wake_watchers(session_id)
        with contextlib.suppress(Exception):  # a push that failed only costs latency
            self._publish(session_id)

    # -- what a backend fills ------------------------------------------------------------------

    def _publish(self, session_id: str) -> None:
        """Tell other processes (the default: nothing; they poll)."""

    def opened(self, session_id: str) -> None:
        """A watch of ``session_id`` begins in this process (a backend subscribes here)."""

    def closed(self, session_id: str) -> None:
        """That watch ended."""


@runtime_checkable
class NotifyingStore(Protocol):
    """A store with a notifier of its own (one that pushes across processes)."""

    def notifier(self) -> Notifier: ...


_polling = Notifier()


def notifier_of(store: object) -> Notifier:
    """The store's own notifier, or the polling default."""
    if isinstance(store, NotifyingStore):
        return store.notifier()
    return _polling


def publish(store: object, session_id: str) -> None:
    """Notify the holder of ``session_id`` through ``store``'s notifier (never raises)."""
    notifier_of(store).publish(session_id)
