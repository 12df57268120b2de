"""A pulse each time a wake this runtime runs ends (its turns settled, parked on a question,
or handed on; its lease released): a waiter in the same process (``SessionHandle.wait``, so
``session.run``) reads the submission again at once instead of on its next poll. Not after
each turn inside the wake: a caller whose run returned would then race the wake's last reads
and release with its next submission (tests/bench/test_step_reads.py counted that as a
second wake). Waiters still poll, slowly, for a submission another process settles.

Only ever used on the runtime's event loop (the turn driver and the waiters both run there).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["TurnEnds"]


class TurnEnds:
    def __init__(self) -> None:
        self._count = 0
        self._event = asyncio.Event()  # bound to a loop on first wait (Python ≥ 3.10)

    @property
    def count(self) -> int:
        """How many wakes ended so far: read it before the submission, then ``after``."""
        return self._count

    def pulse(self) -> None:
        self._count += 1
        ended, self._event = self._event, asyncio.Event()
        ended.set()

    async def after(self, count: int, timeout: float) -> None:
        """Return once a wake ended since ``count`` was read, or after ``timeout``."""
        if self._count != count:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
