"""The in-process queue of the embedded runtime: an asyncio queue of session ids.

It lives and dies with the process. That is safe because wakes are only hints: on start the
runtime's reconciliation scan re-enqueues every session the store says has unsettled work.

A session has at most one wake waiting. A wake says "look at S", and one look sees all of S's
work, so a second waiting wake adds nothing; without this the periodic scan would add one per
waiting session at every interval while the workers are busy, and the queue would grow
without bound. A wake for a session whose wake was already taken (and is being handled) is
kept: the handler may have read the store before the new work landed.

A delayed wake (a model backoff that outlasts an invocation) is a timer on the event loop; a
session has at most one, the earliest asked for. It is lost with the process like every other
wake, and the backoff's end is recorded on the turn, so the scan after a restart waits it out.
"""

from __future__ import annotations

import asyncio

from fxdurable.core import tracecontext

__all__ = ["LocalQueue"]


class LocalQueue:
    url = "local"
    delays_wakes = True

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, str, str | None]] = asyncio.Queue()
        self._waiting: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    async def enqueue(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        if delay_s > 0:
            self._enqueue_later(session_id, reason, delay_s)
            return
        self._put(session_id, reason, tracecontext.current_traceparent())

    def _put(self, session_id: str, reason: str, trace_parent: str | None) -> None:
        if session_id in self._waiting:
            return  # its waiting wake covers this one
        self._waiting.add(session_id)
        self._queue.put_nowait((session_id, reason, trace_parent))

    def _enqueue_later(self, session_id: str, reason: str, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay_s
        timer = self._timers.get(session_id)
        if timer is not None and timer.when() <= due:
            return  # an earlier delayed wake covers this one
        if timer is not None:
            timer.cancel()
        trace_parent = tracecontext.current_traceparent()

        def fire() -> None:
            del self._timers[session_id]
            self._put(session_id, reason, trace_parent)

        self._timers[session_id] = loop.call_at(due, fire)

    async def get(self) -> tuple[str, str, str | None]:
        session_id, reason, trace_parent = await self._queue.get()
        self._waiting.discard(session_id)
        return session_id, reason, trace_parent

    def pending(self) -> int:
        return self._queue.qsize()

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
