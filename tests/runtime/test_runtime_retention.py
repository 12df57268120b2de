"""Retention through the runtime (docs/erasure.md "Retention"): an admission records the
agent's ``retention_days`` on the session, and the sweep erases it by the runtime's injected
clock once it has been idle that long; a session still running a turn is not erased."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.core.retention import DAY_S
from fxdurable.runtime.retention import sweep_retention
from fxdurable.testing.clock import FakeClock
from tests.runtime.fxrt_support import FAST, fresh_store, rounds_done, run


class _Empty(pydantic.BaseModel):
    pass


def test_an_admission_records_the_agents_retention_and_the_sweep_honours_it(
    tmp_path: Path,
) -> None:
    started, release = threading.Event(), threading.Event()

    def hold(_: _Empty, ctx: fx.ToolContext) -> str:
        started.set()
        release.wait(10)
        return "held"

    tool = fx.define_tool("hold", description="hold", input_model=_Empty, execute=hold)
    model = fx.ScriptedModel(
        lambda r: fx.reply("done") if rounds_done(r) else fx.reply("", fx.call("hold"))
    )
    # A time budget past the days the clock moves, or the held turn would fail on it.
    patient = fx.Durability(timeout_s=10 * DAY_S)
    agent = fx.Agent("a", model, tools=[tool], retention_days=2, durability=patient)
    clock = FakeClock()

    async def main() -> None:
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, clock=clock
        ) as rt:
            first = rt.session("s1")
            sub = await first.submit("go")
            assert await asyncio.to_thread(started.wait, 10)
            clock.advance(3 * DAY_S)
            # Running a turn: not idle, so not due however old its last event.
            assert (await asyncio.to_thread(sweep_retention, rt.journal)).erased == []
            release.set()
            assert (await first.wait(sub.id, timeout=10)).status == "completed"
            # Its worker's last write (the lease released) lands before the clock moves on.
            for _ in range(1000):
                if (record := await first.record()) is not None and record.lease.owner is None:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the worker never released its lease")
            assert record.retention_days == 2.0
            assert record.updated_at is not None
            assert record.retain_until == record.updated_at + 2 * DAY_S
            clock.advance(DAY_S)
            assert (await asyncio.to_thread(sweep_retention, rt.journal)).erased == []
            clock.advance(1.01 * DAY_S)
            assert (await asyncio.to_thread(sweep_retention, rt.journal)).erased == ["s1"]
            assert await first.record() is None

    run(main())
