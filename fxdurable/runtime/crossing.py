"""The one place async runtime code crosses into the synchronous durable core.

Journal calls run in a worker thread so a store round trip (an fsync, a network hop) never
blocks the event loop: heartbeats and other sessions keep running meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["durable"]

P = ParamSpec("P")
R = TypeVar("R")


async def durable(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a synchronous journal or store call without blocking the loop."""
    return await asyncio.to_thread(fn, *args, **kwargs)
