"""A running tool's progress reports, written to its task record at most every 100 ms.

``ctx.progress(chunk)`` never blocks and never fails the call: it appends ``chunk`` to an
in-memory tail (the last :data:`~fxdurable.core.journal.MAX_PROGRESS_CHARS` characters) and
nudges a pump task on the event loop. The pump writes the whole tail with one
``record_progress`` transition, then waits out the interval: chunks reported meanwhile
coalesce into the next write, so the number of writes is bounded by elapsed time / interval
(plus one), however fast the tool reports. Appending (rather than keeping only the latest
chunk) suits both a stream of output lines and a status that the tool reports whole: the
tail ends with the latest chunk either way.

A write that fails (the lease taken over, the store busy) is logged and the call goes on;
after a refusal that will not change (lease lost, task no longer in this run) the pump stops
writing. :meth:`ProgressPump.aclose` waits for a write in flight, so the call's finish never
races a late progress write; what was reported after the last write is dropped, since the
result replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from fxdurable.core.crash import crash_point
from fxdurable.core.journal import MAX_PROGRESS_CHARS
from fxdurable.errors import IllegalTransitionError, LeaseLostError
from fxdurable.runtime.crossing import durable

__all__ = ["PROGRESS_EVERY_S", "ProgressPump"]

log = logging.getLogger("fxdurable.progress")

# The contract: a task's progress is written at most once per 100 ms.
PROGRESS_EVERY_S = 0.1


class ProgressPump:
    """Coalesces one tool run's reports into throttled writes (``write(text)`` is sync: it
    runs in a worker thread). Start it with :meth:`start`, stop it with :meth:`aclose`."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        tool: str,
        every_s: float = PROGRESS_EVERY_S,
    ) -> None:
        self._write = write
        self._tool = tool
        self._every_s = every_s
        self._lock = threading.Lock()  # a sync tool reports from its own thread
        self._tail = ""
        self._dirty = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.writes = 0  # committed writes: what the tests count

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(self._pump())

    def report(self, chunk: str) -> None:
        """Append ``chunk``; safe from the loop and from any thread. Never raises for a
        closed pump (a tool thread may outlive its call's timeout)."""
        if not isinstance(chunk, str):
            chunk = str(chunk)
        with self._lock:
            if self._closed:
                return
            self._tail = (self._tail + chunk)[-MAX_PROGRESS_CHARS:]
            self._dirty = True
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed under a stray thread
                loop.call_soon_threadsafe(self._wake.set)

    async def aclose(self) -> None:
        """Stop writing; return once no write is in flight (pending text is dropped)."""
        with self._lock:
            self._closed = True
        self._wake.set()
        if self._task is not None:
            await self._task

    def cancel(self) -> None:
        """Teardown without waiting (the worker itself is being cancelled)."""
        with self._lock:
            self._closed = True
        if self._task is not None:
            self._task.cancel()

    async def _pump(self) -> None:
        last_write = float("-inf")
        while True:
            await self._wake.wait()
            wait_s = last_write + self._every_s - time.monotonic()
            if wait_s > 0 and not self._closed:
                # Sleep out the interval, but wake at once for a close.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing(), wait_s)
            with self._lock:
                if self._closed:
                    return
                self._wake.clear()
                if not self._dirty:
                    continue
                text, self._dirty = self._tail, False
            last_write = time.monotonic()
            try:
                await durable(self._write, text)
            except (LeaseLostError, IllegalTransitionError) as exc:
                log.warning("progress of %s no longer recorded: %s", self._tool, exc)
                return
            except Exception:
                log.warning("could not record progress of %s", self._tool, exc_info=True)
                continue
            self.writes += 1
            if self.writes == 1:
                crash_point("tool.after-progress", self._tool)

    async def _closing(self) -> None:
        while not self._closed:
            self._wake.clear()
            await self._wake.wait()
