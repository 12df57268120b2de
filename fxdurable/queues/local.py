"""The in-process queue of the embedded runtime: an asyncio queue of session ids.

It lives and dies with the process. That is safe because wakes are only hints: on start the
runtime's reconciliation scan re-enqueues every session the store says has unsettled work.

A session has at most one wake waiting. A wake says "look at S", and one look sees all of S's
work, so a second waiting wake adds nothing; without this the periodic scan would add one per
waiting session at every interval while the workers are busy, and the queue would grow
without bound. A wake for a session whose wake was already taken (and is being handled) is
kept: the handler may have read the store before the new work landed.
"""

from __future__ import annotations

import asyncio

from fxdurable.core import tracecontext

__all__ = ["LocalQueue"]


class LocalQueue:
    url = "local"

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, str, str | None]] = asyncio.Queue()
        self._waiting: set[str] = set()

    async def enqueue(self, session_id: str, *, reason: str) -> None:
        if session_id in self._waiting:
            return  # its waiting wake covers this one
        self._waiting.add(session_id)
        self._queue.put_nowait((session_id, reason, tracecontext.current_traceparent()))

    async def get(self) -> tuple[str, str, str | None]:
        session_id, reason, trace_parent = await self._queue.get()
        self._waiting.discard(session_id)
        return session_id, reason, trace_parent

    def pending(self) -> int:
        return self._queue.qsize()

    async def aclose(self) -> None:
        return None
