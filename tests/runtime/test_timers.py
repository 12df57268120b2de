"""``ctx.sleep`` / ``ctx.wait_until`` in durable tools (runtime/timers.py): the wake-up time is
a recorded step; the runtime's clock and sleep are injected (a fake sleep that moves a fake
clock), so an hour's wait runs at once and what was waited is measured, not slept. The crash
case (a re-execution waits only for what is left) is tests/crash/test_crash_timers.py."""

from __future__ import annotations

import json

import pydantic
import pytest
from fxrt_support import FAST, check_invariants, fresh_store, run, tasks

import fxdurable as fx
from fxdurable.testing import FakeClock

SESSION = "s1"


class Wait(pydantic.BaseModel):
    seconds: float


def _runtime_pieces(clock: FakeClock) -> tuple[list[float], object]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    return slept, sleep


def _waiting_agent(body) -> fx.Agent:  # type: ignore[no-untyped-def]
    waiter = fx.define_tool(
        "waiter", description="Wait.", input_model=Wait, execute=body, durable=True, timeout_s=30
    )
    model = fx.ScriptedModel([fx.reply("", fx.call("waiter", seconds=3600)), fx.reply("done")])
    # The wait counts against the turn's time budget: an hour's sleep needs more than its 1 h.
    return fx.Agent("eng", model, tools=[waiter], durability=fx.Durability(timeout_s=7200))


def test_ctx_sleep_records_its_wake_up_time_and_waits_it_out(tmp_path):
    clock = FakeClock()
    slept, sleep = _runtime_pieces(clock)
    woke: list[float] = []

    async def waiter(inp: Wait, ctx: fx.ToolContext) -> str:
        await ctx.sleep(inp.seconds)
        woke.append(clock.now())
        await ctx.wait_until(clock.now() + 60)
        return "woke"

    async def main():
        async with fx.Runtime(
            [_waiting_agent(waiter)],
            store=fresh_store(tmp_path),
            settings=FAST,
            clock=clock,
            sleep=sleep,  # type: ignore[arg-type]
        ) as rt:
            start = clock.now()
            s = rt.session(SESSION)
            sub = await s.submit("wait")
            settled = await s.wait(sub.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            (task,) = tasks(rt, sub.id)
            assert task.result == "woke"
            steps = {step.name: json.loads(step.value) for step in task.steps}
            assert steps == {"fx.wait/1": start + 3600, "fx.wait/2": start + 3660}
            assert woke == [start + 3600]
            await check_invariants(rt, SESSION)

    run(main())
    assert sum(slept) == pytest.approx(3660)  # waited once, in full, for each


def test_a_sleep_needs_a_durable_tool_and_a_sensible_time(tmp_path):
    errors: list[str] = []

    async def bad(inp: Wait, ctx: fx.ToolContext) -> str:
        for wait in (lambda: ctx.sleep(-1), lambda: ctx.wait_until(float("nan"))):
            try:
                await wait()
            except fx.ConfigurationError as exc:
                errors.append(str(exc))
        return "checked"

    async def plain(inp: Wait, ctx: fx.ToolContext) -> str:
        try:
            await ctx.sleep(1)
        except fx.StepError as exc:
            errors.append(str(exc))
        return "plain"

    async def main():
        agent = _waiting_agent(bad)
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("wait")
            assert (await s.wait(sub.id, timeout=10)).status.value == "completed"
        ctx = fx.ToolContext(execution_id="x", session_id="s", tool_name="plain", attempt=1)
        await plain(Wait(seconds=1), ctx)

    run(main())
    assert "ctx.sleep takes a number of seconds >= 0" in errors[0]
    assert "ctx.wait_until takes a time in epoch seconds" in errors[1]
    assert "needs a durable tool" in errors[2]
