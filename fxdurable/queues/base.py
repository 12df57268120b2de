"""The queue contract: wake-up hints, never the truth (DESIGN §1).

A wake says "session S may have work". Duplicates, reordering and redelivery are harmless:
the worker that receives one claims the session's lease and reads what the store proves.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["WakeQueue"]


class WakeQueue(Protocol):
    url: str

    async def enqueue(self, session_id: str, *, reason: str) -> None:
        """Ask some worker to look at ``session_id``. ``reason`` is for logs and traces."""
        ...

    async def aclose(self) -> None: ...
