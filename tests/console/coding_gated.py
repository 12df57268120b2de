"""The coding agent with test gates in ``edit_file`` and ``shell`` (``--agents
tests.console.coding_gated:agents``): each call does its work, then waits, running, until the
file ``$FXD_CONSOLE_GATES/<tool>`` exists, so a browser test can press the crash button
while an edit or a test run is in flight (done, its result not recorded) without sleeps.
Everything else is ``examples.coding_agent.agent:agents``: its tools, its scripted model, its
workspace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
from pathlib import Path
from typing import Any

import fxdurable as fx
from examples.coding_agent.agent import agents as coding_agents

__all__ = ["GATED", "agents", "gated_agents"]

GATED = ("edit_file", "shell")  # each waits at the gate named after it
GATE_POLL_S = 0.02


def _gated(tool: Any) -> Any:
    execute = tool.execute

    async def work_then_wait(inp: Any, ctx: fx.ToolContext) -> str:
        if inspect.iscoroutinefunction(execute):
            result: str = await execute(inp, ctx)
        else:
            result = await asyncio.to_thread(execute, inp, ctx)
        ctx.progress(f"{result}\n(done; waiting for gate {tool.name})\n")
        gate = Path(os.environ["FXD_CONSOLE_GATES"]) / tool.name
        while not gate.exists():
            await asyncio.sleep(GATE_POLL_S)
        return result

    return dataclasses.replace(tool, execute=work_then_wait)


def gated_agents(agents: list[fx.Agent]) -> list[fx.Agent]:
    """``agents`` rebuilt with the gated ``edit_file`` and ``shell`` (an Agent is immutable: a
    new one with the same parts; these have no typed output, pricing or spending budget)."""
    gated = []
    for agent in agents:
        gated.append(
            fx.Agent(
                agent.name,
                agent.model,
                instructions=agent.instructions,
                tools=[_gated(t) if t.name in GATED else t for t in agent.tools],
                durability=agent.durability,
                before_tool=agent.before_tool,
                after_tool=agent.after_tool,
                parallel_tools=agent.parallel_tools,
                max_parallel_tools=agent.max_parallel_tools,
            )
        )
    return gated


def agents() -> list[fx.Agent]:
    """The coding agent with the gated ``edit_file`` and ``shell``."""
    return gated_agents(coding_agents())
