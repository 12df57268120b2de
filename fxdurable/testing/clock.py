"""A clock a test moves by hand, for code that takes a :class:`~fxdurable.core.clock.Clock`."""

from __future__ import annotations

import threading

__all__ = ["FakeClock"]


class FakeClock:
    """Wall-clock time that only moves when told. Thread-safe: journal calls run in threads."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def set(self, now: float) -> None:
        with self._lock:
            self._now = now
