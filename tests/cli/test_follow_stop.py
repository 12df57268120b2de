"""``fxdurable.cli.follow.follow`` (``fxdurable demo``, the coding agent's run.py) and a stop
(SIGTERM, Ctrl-C) while a step runs long: it gives up the wait after the runtime's shutdown
grace, and the runtime cancels the step as it closes. It used to wait for the step's
boundary, so a SIGTERM during a two-minute shell command hung the process until the command
ended (or forever, for a tool that does not)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.cli.follow import follow
from fxdurable.cli.render import Style


class Empty(pydantic.BaseModel):
    pass


def test_a_stop_during_a_step_that_never_ends_gives_up_after_the_grace(tmp_path: Path) -> None:
    started, cancelled = asyncio.Event(), []

    async def forever(inp: Empty, ctx: fx.ToolContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(ctx.execution_id)
            raise
        return "never"

    agent = fx.Agent(
        "a",
        fx.ScriptedModel([fx.reply("", fx.call("forever")), fx.reply("done")]),
        tools=[fx.define_tool("forever", description="x", input_model=Empty, execute=forever)],
    )

    async def main() -> list[fx.Submission] | None:
        async with fx.Runtime(
            [agent], store=f"sqlite:///{tmp_path / 'fx.db'}", shutdown_grace_s=0.2
        ) as rt:
            session = rt.session("s1")
            sub = await session.submit("go")
            await started.wait()
            rt.request_stop("the test")
            following = follow(rt, session, [sub], 0, Style(io.StringIO()))
            # A hang bound, not a timing assertion: the fix returns after the 0.2 s grace.
            return await asyncio.wait_for(following, timeout=30)

    assert asyncio.run(main()) is None
    assert len(cancelled) == 1  # the runtime cancelled the step as it closed
