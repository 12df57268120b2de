"""When an invocation must stop: its deadline, or a shutdown request (SIGTERM)."""

from __future__ import annotations

import time

__all__ = ["InvocationBudget"]


class InvocationBudget:
    """Checked at every step boundary. ``deadline_s`` is how long this invocation may run
    (Lambda's remaining time, an RQ job timeout); ``margin_s`` is kept in hand to commit,
    enqueue the continuation and release the lease.
    """

    def __init__(self, deadline_s: float | None = None, *, margin_s: float = 0.0) -> None:
        self._ends_at = None if deadline_s is None else time.monotonic() + deadline_s
        self._margin_s = margin_s
        self._stop_reason: str | None = None
        self._progressed = False

    def request_stop(self, reason: str = "shutdown") -> None:
        self._stop_reason = self._stop_reason or reason

    def requested_stop(self) -> str | None:
        """Why a stop was requested (a shutdown), if one was; the deadline aside."""
        return self._stop_reason

    def record_progress(self) -> None:
        """A step is about to run in this invocation: the deadline may stop us from now on."""
        self._progressed = True

    def remaining(self) -> float | None:
        return None if self._ends_at is None else self._ends_at - time.monotonic()

    def stop_reason(self) -> str | None:
        """Why the invocation should stop at this boundary, or None to go on."""
        if self._stop_reason is not None:
            return self._stop_reason
        remaining = self.remaining()
        # Every invocation takes at least one step before its deadline may stop it: otherwise
        # a budget smaller than claim + resume would yield forever without progress.
        if self._progressed and remaining is not None and remaining <= self._margin_s:
            return "deadline"
        return None
