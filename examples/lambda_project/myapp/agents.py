"""The agents the functions run: ``FXD_AGENTS=myapp.agents:agents`` (the template's
``AgentsImport``). Replace the example with your own; keep ``agents`` a list of
``fx.Agent`` or a function returning one.

``FXD_MODEL`` (the template's ``Model``) names the model, e.g. ``openai/gpt-4o-mini``, with
``OPENAI_API_KEY`` loaded from SSM at a cold start. ``FXD_MODEL=scripted`` runs a scripted
model instead, offline: for trying the functions without a provider.
"""

from __future__ import annotations

import os

import pydantic

import fxdurable as fx


class Region(pydantic.BaseModel):
    name: str


@fx.tool  # safe: a read, so a crash mid-call just runs it again
async def read_region(inp: Region, ctx: fx.ToolContext) -> str:
    """Read a region's status."""
    return f"{inp.name}: ok"


def _model() -> fx.ScriptedModel | str:
    name = os.environ.get("FXD_MODEL") or "openai/gpt-4o-mini"
    if name == "scripted":
        return fx.ScriptedModel(
            [fx.reply("", fx.call("read_region", name="eu")), fx.reply("eu is ok.")]
        )
    return name


def agents() -> list[fx.Agent]:
    return [
        fx.Agent(
            "ops",
            model=_model(),
            instructions="You check the status of regions with read_region.",
            tools=[read_region],
        )
    ]
