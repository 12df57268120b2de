"""The agent the browser tests serve (``--agents tests.console.console_agents:agents``).

One agent, so the console's ``POST /chat`` needs no agent name; its scripted model picks a
story by the prompt:

- ``... gate NAME ...``: calls ``wait_for_gate(name=NAME)``, which reports progress and waits
  until the file ``$FXD_CONSOLE_GATES/NAME`` exists (the test opens it), so a turn stays
  running exactly as long as a test needs (steer, abort, network drop) with no sleeps.
- ``... deploy ...``: calls ``deploy(version="2.0")``, which ``before_tool`` asks a person
  about (the inline permission prompt); ``deploy`` appends a line to
  ``$FXD_CONSOLE_GATES/deployments.log``.
- ``... think at NAME ...``: answers in text only, and its stream stops after the first
  chunk until ``$FXD_CONSOLE_GATES/NAME`` exists: the chunk is recorded as a partial at once
  (``partial_text_every_s=0``), so the page shows the model's text while it streams.
- anything else: calls ``note`` (returns at once) and answers ``Done: noted '<prompt>'.``.

Steering (a user message the model reads at its next call) is answered with ``Noted: <it>``.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pydantic

import fxdurable as fx
from fxdurable.runtime.models.base import StreamPart, TextDelta
from fxdurable.runtime.models.scripted import turn_messages

__all__ = ["agents"]

GATE_POLL_S = 0.02  # how often the gate is looked at


class GateInput(pydantic.BaseModel):
    name: str


class DeployInput(pydantic.BaseModel):
    version: str


class NoteInput(pydantic.BaseModel):
    text: str


def _gates() -> Path:
    return Path(os.environ["FXD_CONSOLE_GATES"])


async def _wait_at(gate: str) -> None:
    # Async and polling, so an abort cancels it at once (a thread could not be stopped).
    while not (_gates() / gate).exists():
        await asyncio.sleep(GATE_POLL_S)


async def wait_for_gate(inp: GateInput, ctx: fx.ToolContext) -> str:
    ctx.progress(f"waiting for gate {inp.name}\n")
    await _wait_at(inp.name)
    return f"gate {inp.name} opened"


class PausingModel(fx.ScriptedModel):
    """The scripted model, whose text stream pauses after its first chunk at the gate a
    ``think at NAME`` prompt names."""

    async def stream(self, request: fx.ModelRequest) -> AsyncIterator[StreamPart]:
        turn = turn_messages(request)
        thinking = re.search(r"\bthink at (\w+)", turn[0].text if turn else "")
        first = True
        async for part in super().stream(request):
            yield part
            if thinking and first and isinstance(part, TextDelta):
                first = False
                await _wait_at(thinking.group(1))


def deploy(inp: DeployInput, ctx: fx.ToolContext) -> str:
    with (_gates() / "deployments.log").open("a") as log:
        log.write(f"release={inp.version} execution={ctx.execution_id}\n")
    return f"release {inp.version} deployed"


def note(inp: NoteInput, ctx: fx.ToolContext) -> str:
    return f"noted {inp.text!r}"


def before_tool(tool: str, arguments: str) -> fx.Ask | None:
    if tool == "deploy":
        return fx.ask(f"May I deploy {arguments}?")
    return None


def policy(request: fx.ModelRequest) -> fx.ModelResponse:
    turn = turn_messages(request)
    asked = turn[0].text if turn else ""
    results = [m for m in turn if m.role == "tool"]
    if results:
        return fx.reply(f"Done: {results[-1].text}.")
    gate = re.search(r"\bgate (\w+)", asked)
    if gate:
        return fx.reply("Waiting at the gate.", fx.call("wait_for_gate", name=gate.group(1)))
    if "deploy" in asked:
        return fx.reply("Deploying release 2.0.", fx.call("deploy", version="2.0"))
    if "think at" in asked:
        return fx.reply("Let me think this through carefully, one step at a time.")
    if asked.startswith("Also "):
        return fx.reply(f"Noted: {asked}")
    return fx.reply("Taking a note.", fx.call("note", text=asked))


def agents() -> list[fx.Agent]:
    tools = [
        fx.define_tool(
            "wait_for_gate",
            description="Wait until the test opens a gate.",
            input_model=GateInput,
            execute=wait_for_gate,
        ),
        fx.define_tool(
            "deploy",
            description="Deploy a release.",
            input_model=DeployInput,
            execute=deploy,
            replay="unsafe",
        ),
        fx.define_tool("note", description="Take a note.", input_model=NoteInput, execute=note),
    ]
    model = PausingModel(policy, name="scripted/console-tests")
    durability = fx.Durability(partial_text_every_s=0.0)  # every streamed chunk is shown
    return [fx.Agent("tester", model, tools=tools, before_tool=before_tool, durability=durability)]
