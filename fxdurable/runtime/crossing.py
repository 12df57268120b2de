"""The one place async runtime code crosses into the synchronous durable core.

Journal calls run in a worker thread so a store round trip (an fsync, a network hop) never
blocks the event loop: heartbeats and other sessions keep running meanwhile.

Most calls share the loop's default executor, a handful of threads (``cpu_count + 4``) that
sync tools use too. The heartbeat does not (:func:`durable_apart`): during a store outage each
call in that pool hangs until its socket timeout and resends, and sync tools may hold the
rest, so a renewal queued behind them would never reach the store before the lease lapsed.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["durable", "durable_apart"]

P = ParamSpec("P")
R = TypeVar("R")

# Enough for every session a worker runs at once to renew while others hang in a store that
# does not answer. Threads are made as calls need them and then reused: a store that keeps
# a connection per thread (SQLite) opens at most this many, not one per beat.
APART_THREADS = 32

# One pool per event loop, not per process: a worker process forks its work horses, and a
# pool made before the fork would believe its (gone) threads idle and never run a call.
_apart_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ThreadPoolExecutor] = (
    weakref.WeakKeyDictionary()
)


async def durable(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a synchronous journal or store call without blocking the loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def durable_apart(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Like :func:`durable`, in a pool kept for calls the lease depends on, so that nothing
    else the loop runs in threads (tools, other journal calls) can keep them waiting. A
    caller that stops waiting (a timeout, a cancellation) abandons the call: it finishes in
    its thread and the result is dropped."""
    loop = asyncio.get_running_loop()
    pool = _apart_pools.get(loop)
    if pool is None:
        pool = ThreadPoolExecutor(APART_THREADS, thread_name_prefix="fxd-heartbeat")
        _apart_pools[loop] = pool
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(pool, call)
