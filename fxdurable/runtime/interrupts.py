"""Aborts and steers that act now, in the process holding the session's lease.

An abort or a steer is recorded first (the journal), then the store's notifier wakes the
holder (:mod:`fxdurable.core.notify`: at once in this process, by pub/sub or a short poll
elsewhere). The holder's :func:`watch_interrupts` reads the records and tells the running
turn (:class:`Interruptible`):

- an abort cancels the running tool calls (a safe async one is recorded ``cancelled``, any
  other ``outcome_unknown``: a sync tool's thread cannot be stopped, so what it does may still
  happen, and the lease stays held until it returns) and cuts a streaming model reply;
- a steer cuts a streaming model reply whose request did not show it (:class:`LiveStream`):
  the text streamed so far is recorded as an interrupted assistant entry, exactly as recovery
  records a stream a crash cut, and the turn calls the model again with the steer. A steer
  never cuts a tool call: it waits for the call's result.

Nothing here decides an outcome: the records do, at the turn's step boundary; this only makes
the turn look now instead of at its next heartbeat (docs/aborting.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Journal
from fxdurable.core.notify import notifier_of, watching
from fxdurable.runtime.crossing import durable

__all__ = ["Interruptible", "LiveStream", "watch_interrupts"]

log = logging.getLogger("fxdurable.worker")


@dataclass(slots=True)
class LiveStream:
    """A model reply streaming now. ``steering``: how many steering entries its request
    showed the model (a steer beyond those cuts it). ``pending``: text streamed but not yet
    written as a partial, recorded with the cut."""

    steering: int
    task: asyncio.Future[Any] | None = None
    pending: list[str] = field(default_factory=list)
    requested: bool = False
    # A partial's write is in flight: cancelling now could land it after the cut's record
    # (and its text twice); the stream cuts itself once the write returns.
    flushing: bool = False
    started: float = field(default_factory=time.monotonic)

    def cut(self) -> None:
        self.requested = True
        if not self.flushing and self.task is not None:
            self.task.cancel()


class Interruptible(Protocol):
    """The running turn, as the watcher sees it (:class:`~fxdurable.runtime.turn.TurnDriver`)."""

    def call_age(self) -> float | None: ...
    def abort_requested(self) -> None: ...
    def steered(self, steering: int) -> None: ...


async def watch_interrupts(journal: Journal, session_id: str, box: Sequence[Interruptible]) -> None:
    """Until cancelled: wake on the session's notifications (or poll while a call runs) and
    hand what the records say to the turn in ``box`` (the worker's current driver)."""
    notifier = notifier_of(journal.store)
    loop = asyncio.get_running_loop()
    told = asyncio.Event()
    aborted = False

    def wake() -> None:  # any thread: the journal's, a backend's subscriber
        loop.call_soon_threadsafe(told.set)

    async def check(driver: Interruptible) -> None:
        nonlocal aborted
        try:
            abort, steering = await durable(journal.read, lambda v: _interrupts(v, session_id))
        except Exception as exc:  # noticed at the next check, beat or boundary
            log.debug("interrupt check for %s failed: %s", session_id, exc)
            return
        if abort and not aborted:
            aborted = True
            crash_point("abort.before-cancel")
            driver.abort_requested()
        elif steering:
            driver.steered(steering)

    with watching(session_id, wake):
        notifier.opened(session_id)
        period = notifier.period_s
        try:
            while True:
                # Wake when the running call turns ``period`` old, or a period from now: a
                # call shorter than a period costs no read at all, however the ticks fall.
                age = _age(box)
                wait = period - age if age is not None and age < period else period
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await told.wait()
                hinted, driver = told.is_set(), (box[0] if box else None)
                told.clear()
                # Between calls nothing is read: the step boundary reads the same records.
                age = _age(box)
                if driver is not None and (hinted or (age is not None and age >= period)):
                    await check(driver)
        finally:
            notifier.closed(session_id)


def _age(box: Sequence[Interruptible]) -> float | None:
    """How long the current driver's call has run (None: no call runs, or no driver)."""
    return box[0].call_age() if box else None


def _interrupts(view: Any, session_id: str) -> tuple[bool, int]:
    """Whether the running submission is being aborted, and how many steering entries wait."""
    unsettled = view.unsettled_submissions(session_id)
    if not unsettled:
        return False, 0
    session = view.get_session(session_id)
    return bool(unsettled[0].abort_requested), len(session.steering) if session else 0
