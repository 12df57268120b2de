"""The queue contract: wake-up hints, never the truth (DESIGN §1).

A wake says "session S may have work". Duplicates, reordering and redelivery are harmless:
the worker that receives one claims the session's lease and reads what the store proves.

The protocols live in the core, beside the store's, because the runtime's worker (a layer
below the queue implementations' composition in :mod:`fxdurable.backends`) enqueues wakes.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["InProcessQueue", "WakeQueue"]


class WakeQueue(Protocol):
    url: str
    # Whether ``enqueue(..., delay_s=...)`` holds the wake back. A queue that cannot (RQ
    # without its scheduler, a FIFO SQS queue) delivers it at once and ignores the delay.
    delays_wakes: bool

    async def enqueue(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        """Ask some worker to look at ``session_id``, after ``delay_s`` seconds where the
        queue can delay a wake. ``reason`` is for logs and traces."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class InProcessQueue(WakeQueue, Protocol):
    """A queue this process consumes itself (the embedded runtime's ``local`` queue): its
    wakes run on the runtime's own worker tasks, not in a worker elsewhere."""

    async def get(self) -> tuple[str, str, str | None]:
        """The next ``(session_id, reason, trace_parent)``, waiting for one. ``trace_parent``
        is the W3C traceparent of whoever enqueued it, when traced."""
        ...
