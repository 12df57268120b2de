"""``session.wait`` / ``session.run`` on the runtime that drives the turn: the submission is
read again as soon as the turn returns, not on the next poll (``poll_s``), so a turn run in
process costs its caller no poll latency and no polling reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pydantic

import fxdurable as fx


class Item(pydantic.BaseModel):
    name: str


@fx.tool(replay="safe")
def look(inp: Item, ctx: fx.ToolContext) -> str:
    """Look at an item."""
    return f"saw {inp.name}"


def _agent() -> fx.Agent:
    model = fx.ScriptedModel(
        lambda request: (
            fx.reply("seen")
            if any(m.role == "tool" for m in request.messages)
            else fx.reply("", fx.call("look", name="box"))
        )
    )
    return fx.Agent("looker", model, tools=[look])


def test_a_turn_run_here_is_seen_settled_when_it_returns_not_on_the_next_poll(
    tmp_path: Path,
) -> None:
    async def main() -> tuple[str | None, int]:
        async with fx.Runtime([_agent()], store=f"sqlite:///{tmp_path}/w.db") as rt:
            session = rt.session("s1")
            reads = 0
            real = session.submission

            async def counted(submission_id: str) -> fx.Submission | None:
                nonlocal reads
                reads += 1
                return await real(submission_id)

            session.submission = counted  # type: ignore[method-assign]
            sub = await session.submit("Look at the box.")
            # A poll of an hour: only the in-process signal can end this wait within 30 s.
            settled = await asyncio.wait_for(session.wait(sub.id, poll_s=3600), 30)
            return settled.result, reads

    result, reads = asyncio.run(main())
    assert result == "seen"
    assert reads <= 3, reads  # before the turn, perhaps once mid-way, and after it returned
