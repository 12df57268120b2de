"""A framework's turn on the HTTP line stream (``POST /chat``, the app in process over httpx's
ASGI transport): the text its model streams and its tool calls reach the stream as the lines of
one of our own agents' turns, in the same order, so the console draws a pydantic-ai, OpenAI
Agents SDK or LangChain turn as it draws ours.

Each framework's agent is the crash matrix's (``frameworks.build``: a safe read, an idempotent
note, an unsafe deploy, then an answer streamed in several deltas), every delta written at once
(``partial_text_every_s=0.0``). Our own agent (``own_agent``) does the same turn with fxdurable's
``ScriptedModel``, so the expected lines are checked to be those of one of ours.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest
from frameworks import FRAMEWORKS, build

import fxdurable as fx
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from tests.http.http_lines import Line, chat_in_process

EVERY_DELTA = fx.Durability(partial_text_every_s=0.0)
OURS = "fxdurable"

# What the console draws of the turn: each line's type and tool, a run of model.partial lines
# as one (how many deltas a model sends is its own).
TOOLS = ("read_status", "record_note", "deploy")
EXPECTED = [
    ("turn_start", None),
    ("turn.started", None),
    ("attempt.started", None),
    *[
        pair
        for tool in TOOLS
        for pair in (("model.completed", None), ("tool.started", tool), ("tool.completed", tool))
    ],
    ("model.partial", None),
    ("model.completed", None),
    ("turn_end", None),
]


class Region(pydantic.BaseModel):
    region: str


class Text(pydantic.BaseModel):
    text: str


class Release(pydantic.BaseModel):
    release: str


def own_agent(world: Path, durability: fx.Durability) -> fx.Agent:
    """One of our own agents doing the frameworks' turn: the same three tools (their effects
    are not this test's), the same calls, the answer streamed 8 characters a delta."""

    @fx.tool(replay="safe")
    def read_status(args: Region) -> str:
        return f"{args.region}: healthy"

    @fx.tool(replay="idempotent")
    def record_note(args: Text) -> str:
        return "noted"

    @fx.tool
    def deploy(args: Release, ctx: fx.ToolContext) -> str:
        return f"release {args.release} deployed ({ctx.execution_id})"

    calls = [fx.call("read_status", region="eu"), fx.call("record_note", text="deploying r1")]
    calls.append(fx.call("deploy", release="r1"))

    def policy(request: ModelRequest) -> ModelResponse:
        results = [m.text for m in request.messages if m.role == "tool"]
        if len(results) < len(calls):
            return fx.reply("", calls[len(results)])
        return fx.reply(f"deployed: {results[-1]}")

    tools = [read_status, record_note, deploy]
    return fx.Agent(
        "ops", fx.ScriptedModel(policy, chunk_size=8), tools=tools, durability=durability
    )


def shape(lines: list[Line]) -> list[tuple[str, str | None]]:
    shown: list[tuple[str, str | None]] = []
    for line in lines:
        pair = (line["type"], line["data"].get("tool"))
        if not (pair == ("model.partial", None) and shown and shown[-1] == pair):
            shown.append(pair)
    return shown


@pytest.mark.parametrize("framework", [OURS, *FRAMEWORKS])
def test_a_framework_turn_streams_its_text_and_tool_lines_as_ours_do(
    tmp_path: Path, framework: str
) -> None:
    world = tmp_path / "world"
    world.mkdir()
    if framework == OURS:
        agent = own_agent(world, EVERY_DELTA)
    else:
        agent = build(framework, world, EVERY_DELTA)
    lines = chat_in_process(agent, f"sqlite:///{tmp_path}/http.db", "deploy r1")

    assert shape(lines) == EXPECTED, [(x["type"], x["data"]) for x in lines]
    cursors = [line["cursor"] for line in lines]
    assert cursors == sorted(set(cursors)), cursors  # each line once, in the journal's order
    partials = [line for line in lines if line["type"] == "model.partial"]
    answer: Any = lines[-1]["data"]["text"]
    assert answer.startswith("deployed: release r1 deployed ("), answer
    # Each of the model's deltas is a line of its own, in the order streamed: together the
    # final answer, in the answer's round, before the model call completed.
    assert len(partials) > 1 and "".join(p["data"]["text"] for p in partials) == answer
    (final,) = [x for x in lines if x["type"] == "model.completed" and x["data"]["text"]]
    assert {p["data"]["round"] for p in partials} == {final["data"]["round"]} == {len(TOOLS)}
    if framework != OURS:  # the framework's own model answered, not ours
        served = [json.loads(x) for x in (world / "model.log").read_text().splitlines()]
        assert {r["framework"] for r in served} == {framework.removesuffix("-graph")}
