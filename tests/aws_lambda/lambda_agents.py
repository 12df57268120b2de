"""The agents the Lambda tests run: the crash suites' story agent (``tests.kit.story``) and
one whose hook always fails. ``FXD_AGENTS=lambda_agents:agents`` with this directory on the
path; ``FXD_TEST_WORLD`` is the outside world's directory, ``FXD_TEST_TOOL_S`` and
``FXD_TEST_DEPLOY_S`` how long the tools take."""

from __future__ import annotations

import os

import fxdurable as fx
from tests.kit.story import Timings, story_agent
from tests.kit.world_env import world_from_env

BROKEN = "broken-agent"


def _seconds(name: str) -> float:
    return float(os.environ.get(name) or 0.0)


async def _failing_hook(tool: str, arguments: str) -> str | None:
    raise RuntimeError("this hook is broken")


def agents() -> list[fx.Agent]:
    world = world_from_env()
    timings = Timings(tool_s=_seconds("FXD_TEST_TOOL_S"), deploy_s=_seconds("FXD_TEST_DEPLOY_S"))
    broken = fx.Agent(
        BROKEN,
        fx.ScriptedModel(lambda _request: fx.reply("reading", fx.call("read_state"))),
        tools=[t for t in story_agent(world).tools if t.name == "read_state"],
        before_tool=_failing_hook,
    )
    return [story_agent(world, timings=timings), broken]
