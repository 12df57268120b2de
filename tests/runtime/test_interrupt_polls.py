"""What the interrupt watcher reads while calls run (runtime/interrupts.py).

Without a pushing notifier (SQLite, DynamoDB) the watcher polls the store while a call runs.
Its promise (core/notify.py): a call shorter than a poll period costs no read at all, however
the period's ticks fall against the call; a longer one is read at a period into the call, then
every period. A step's request count (bench/dynamodb_steps.py) rests on the first half.
"""

from __future__ import annotations

import asyncio
import time

from fxrt_support import fresh_store, run

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.notify import notifier_of
from fxdurable.runtime.interrupts import watch_interrupts


class CountingJournal(Journal):
    """A real journal that counts its reads (the watcher's only way to the store)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reads: list[float] = []
        self.second_read = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def read(self, body):  # type: ignore[no-untyped-def]
        self.reads.append(time.monotonic())
        if len(self.reads) == 2:
            self._loop.call_soon_threadsafe(self.second_read.set)
        return super().read(body)


class Driver:
    """The running turn as the watcher sees it: ``started`` is when its call began (None:
    between calls), ``young`` reports every call as just begun (back-to-back short calls)."""

    def __init__(self, *, young: bool = False) -> None:
        self.started: float | None = None
        self.young = young

    def call_age(self) -> float | None:
        if self.started is None:
            return None
        return 0.001 if self.young else time.monotonic() - self.started

    def abort_requested(self) -> None:
        raise AssertionError("nothing was aborted")

    def steered(self, steering: int) -> None:
        raise AssertionError("nothing was steered")


async def _watch(tmp_path, driver: Driver, until) -> CountingJournal:  # type: ignore[no-untyped-def]
    journal = CountingJournal(fresh_store(tmp_path), SystemClock(), RandomIds())
    watcher = asyncio.ensure_future(watch_interrupts(journal, "s1", [driver]))
    try:
        await until(journal)
        assert not watcher.done(), watcher.exception()  # it watches until cancelled
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    return journal


def test_calls_shorter_than_a_period_cost_no_read(tmp_path):
    period = notifier_of(fresh_store(tmp_path, "probe.db")).period_s
    driver = Driver(young=True)
    driver.started = time.monotonic()  # a call is always running, each younger than a period

    async def main() -> CountingJournal:
        return await _watch(tmp_path, driver, lambda _: asyncio.sleep(8 * period))

    assert run(main()).reads == []


def test_a_long_call_is_read_a_period_into_it_then_every_period(tmp_path):
    period = notifier_of(fresh_store(tmp_path, "probe.db")).period_s
    driver = Driver()

    async def main() -> CountingJournal:
        async def call(journal: CountingJournal) -> None:
            await asyncio.sleep(period / 2)  # a tick or so with no call: nothing is read
            driver.started = time.monotonic()
            await asyncio.wait_for(journal.second_read.wait(), 10)

        return await _watch(tmp_path, driver, call)

    journal = run(main())
    assert driver.started is not None
    first, second = journal.reads[:2]
    assert first - driver.started >= period  # never before the call is a period old
    assert second - first >= period * 0.9  # then a period apart (timer granularity aside)
