"""Durable waits inside durable tools: ``ctx.sleep(seconds)`` and ``ctx.wait_until(t)``.

The wake-up time is a step of the call (``ctx.step``): the first execution records it, and
an execution after a crash replays it, so it waits only for what is left of the time, never
again for time already waited. Each wait of a call is named by its position among the call's
waits (``fx.wait/1``, ``fx.wait/2``, ...), as stable across re-executions as the tool's own
code is. The clock is the runtime's (an injected one in tests); the wait ends early when the
call is cancelled (an abort, its ``timeout_s``), and the tool should then check
``ctx.cancelled`` as after any long operation.

A wait holds the session's lease and counts against the tool's ``timeout_s`` and the turn's
time budget like any other work of the call: it is for minutes, not for days (a question's
timer, :func:`fxdurable.runtime.hooks.ask`, waits without a lease).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from fxdurable.core.clock import Clock
from fxdurable.errors import ConfigurationError

__all__ = ["sleep_for", "wait_until"]


class ToolContext(Protocol):
    """What a wait needs of :class:`fxdurable.runtime.tools.ToolContext` (a protocol, so this
    module does not import the one that imports it)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def sleeper(self) -> Callable[[float], Awaitable[None]]: ...
    @property
    def cancelled(self) -> asyncio.Event: ...
    @property
    def wait_names(self) -> Iterator[int]: ...
    async def step(self, name: str, fn: Callable[[], float]) -> Any: ...


async def sleep_for(ctx: ToolContext, seconds: float) -> None:
    """``ctx.sleep``: wait ``seconds`` from the first execution's clock reading."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise ConfigurationError(f"ctx.sleep takes a number of seconds >= 0, not {seconds!r}")
    due = await ctx.step(_next_name(ctx), lambda: ctx.clock.now() + seconds)
    await _wait(ctx, float(due))


async def wait_until(ctx: ToolContext, t: float) -> None:
    """``ctx.wait_until``: wait until the wall-clock time ``t`` (seconds since the epoch)."""
    if not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ConfigurationError(f"ctx.wait_until takes a time in epoch seconds, not {t!r}")
    due = await ctx.step(_next_name(ctx), lambda: float(t))
    await _wait(ctx, float(due))


def _next_name(ctx: ToolContext) -> str:
    return f"fx.wait/{next(ctx.wait_names)}"


async def _wait(ctx: ToolContext, due: float) -> None:
    # Re-read the clock after each sleep: an injected sleep may move it by less or more.
    while not ctx.cancelled.is_set() and (left := due - ctx.clock.now()) > 0:
        cancelled = asyncio.ensure_future(ctx.cancelled.wait())
        slept = asyncio.ensure_future(ctx.sleeper(left))
        try:
            await asyncio.wait({cancelled, slept}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
            slept.cancel()
