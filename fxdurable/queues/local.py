"""The in-process queue of the embedded runtime: an asyncio queue of session ids.

It lives and dies with the process. That is safe because wakes are only hints: on start the
runtime's reconciliation scan re-enqueues every session the store says has unsettled work.
"""

from __future__ import annotations

import asyncio

__all__ = ["LocalQueue"]


class LocalQueue:
    url = "local"

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def enqueue(self, session_id: str, *, reason: str) -> None:
        self._queue.put_nowait((session_id, reason))

    async def get(self) -> tuple[str, str]:
        return await self._queue.get()

    def pending(self) -> int:
        return self._queue.qsize()

    async def aclose(self) -> None:
        return None
