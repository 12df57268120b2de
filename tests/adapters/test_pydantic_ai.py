"""The pydantic-ai adapter in process: what it takes from a pydantic-ai agent, what it
refuses, and the version check. The crashes are in ``test_pydantic_ai_crash.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydai_agent import build
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset, FunctionToolset
from pydantic_ai.usage import RunUsage

import fxdurable as fx
from fxdurable.adapters.pydantic_ai import (
    durable_agent,
    replay,
    tool_context,
)
from fxdurable.runtime.models.base import ChatMessage
from fxdurable.runtime.tools import ReplayPolicy


def test_policies_come_from_the_metadata_and_default_to_unsafe(tmp_path: Path) -> None:
    agent = build(tmp_path)
    assert {t.name: t.policy for t in agent.tools} == {
        "read_status": "safe",
        "record_note": "idempotent",
        "deploy": "unsafe",
    }
    schema = agent.tool("deploy").json_schema()  # type: ignore[union-attr]
    assert schema["properties"] == {"release": {"type": "string"}}


def test_a_turn_runs_a_non_streamed_model_with_the_instructions_and_execution_ids(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str | None, list[str]]] = []
    keys: list[tuple[str, str | None]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((info.instructions, [t.name for t in info.function_tools]))
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("deploy", {"release": "r2"})])
        return ModelResponse(parts=[TextPart("done")])

    pa = Agent(FunctionModel(respond), name="plain")

    @pa.tool
    def deploy(ctx: RunContext[str], release: str) -> str:
        keys.append((tool_context(ctx).execution_id, ctx.tool_call_id))
        return f"{release} by {ctx.deps}"

    agent = durable_agent(
        pa, instructions="Be careful.", deps="ops-bot", stream=False, replay={"deploy": "unsafe"}
    )

    async def main() -> tuple[str, list[ChatMessage]]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("plain-1")
            text = await session.run("deploy r2")
            return text, await session.history()

    text, history = asyncio.run(main())
    assert text == "done"
    assert seen == [("Be careful.", ["deploy"])] * 2
    ((execution_id, call_id),) = keys
    assert execution_id == call_id and execution_id  # the key reaches the tool both ways
    assert [(m.role, m.text) for m in history][-2:] == [
        ("tool", "r2 by ops-bot"),
        ("assistant", "done"),
    ]


def test_streamed_text_reaches_the_event_log_the_http_stream_sends(tmp_path: Path) -> None:
    answer = "All four regions are healthy, nothing to deploy today."

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for start in range(0, len(answer), 10):
            yield answer[start : start + 10]

    pa = Agent(FunctionModel(stream_function=stream), name="streamer")
    # Every delta written at once (the default waits a second): each becomes a partial.
    agent = durable_agent(pa, durability=fx.Durability(partial_text_every_s=0.0))

    async def main() -> tuple[str, list[fx.EventRecord]]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("stream-1")
            text = await session.run("status?")
            return text, await session.events()

    text, events = asyncio.run(main())
    partials = [e.data["text"] for e in events if e.type == "model.partial"]
    assert text == answer
    assert len(partials) == 6 and "".join(partials) == answer  # each 10-character delta


@pytest.mark.parametrize("where", ["tool", "toolset"])
@pytest.mark.parametrize(
    ("policy", "status"), [("unsafe", "outcome_unknown"), ("safe", "cancelled")]
)
def test_pydantic_ai_s_own_tool_timeout_is_a_call_cut_short_not_a_retry(
    tmp_path: Path, where: str, policy: ReplayPolicy, status: str
) -> None:
    """pydantic-ai reports its timeout as a ModelRetry; the call is settled by its policy
    instead. A per-tool timeout is also fxdurable's; a toolset's is pydantic-ai's alone."""
    shown: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("migrate", {})])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        shown.append(str(last.parts[0].content))
        return ModelResponse(parts=[TextPart("stopped")])

    async def migrate() -> str:
        await asyncio.sleep(30)
        return "migrated"

    if where == "tool":
        pa = Agent(FunctionModel(respond), name="slow")
        pa.tool_plain(timeout=0.2)(migrate)
    else:
        toolset = FunctionToolset([migrate], timeout=0.2)
        pa = Agent(FunctionModel(respond), name="slow", toolsets=[toolset])
    agent = durable_agent(pa, stream=False, replay={"migrate": policy})

    async def main() -> list[fx.ToolTask]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("slow-1")
            assert await session.run("migrate") == "stopped"
            ids = [e.data["task"] for e in await session.events() if e.type == "tool.started"]
            return [t for t in [await session.task(i) for i in ids] if t is not None]

    (task,) = asyncio.run(main())
    assert task.status == status
    (result,) = shown
    assert result.startswith("migrate timed out after "), result
    assert ("may or may not have completed" in result) == (status == "outcome_unknown")


def test_what_the_adapter_does_not_make_durable_is_refused() -> None:
    class Plan(BaseModel):
        steps: list[str]

    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("x")]))
    with pytest.raises(fx.ConfigurationError, match="output_type"):
        durable_agent(Agent(model, name="a", output_type=Plan))
    external = ExternalToolset([ToolDefinition(name="wipe", description="Wipe it.")])
    with pytest.raises(fx.ConfigurationError, match="'wipe' is an external tool"):
        durable_agent(Agent(model, name="b", toolsets=[external]), replay={"wipe": "safe"})
    with pytest.raises(fx.ConfigurationError, match="lacks: \\['nope'\\]"):
        durable_agent(Agent(model, name="c"), replay={"nope": "safe"})
    with pytest.raises(fx.ConfigurationError, match="needs a name"):
        durable_agent(Agent(model))
    with pytest.raises(fx.ConfigurationError, match="replay policy must be one of"):
        replay("sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_an_approval_tool_asks_a_person_and_runs_only_when_allowed(
    tmp_path: Path, answer: str
) -> None:
    wiped: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("wipe", {"disk": "d1"})])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        return ModelResponse(parts=[TextPart(f"result: {last.parts[0].content}")])

    pa = Agent(FunctionModel(respond), name="careful")

    @pa.tool_plain(requires_approval=True)
    def wipe(disk: str) -> str:
        wiped.append(disk)
        return f"{disk} wiped"

    agent = durable_agent(pa, stream=False)
    assert {t.name: t.policy for t in agent.tools} == {"wipe": "unsafe"}

    async def main() -> tuple[str | None, fx.Submission]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("careful-1")
            sub = await session.submit("wipe d1")
            question = None
            while question is None:  # the turn waits for the answer, durably
                question = await session.question()
                await asyncio.sleep(0.02)
            assert wiped == []  # nothing ran before a person answered
            await session.answer(fx.allow() if answer == "allow" else fx.deny("not today"))
            return question.question, await session.wait(sub.id, timeout=30)

    question, done = asyncio.run(main())
    assert question == 'Allow wipe with {"disk":"d1"}?'
    if answer == "allow":
        assert (wiped, done.result) == (["d1"], "result: d1 wiped")
    else:
        assert (wiped, done.result) == ([], "result: denied: not today")


def test_tool_context_outside_fxdurable_says_so() -> None:
    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("x")]))
    ctx = RunContext(deps=None, model=model, usage=RunUsage())
    with pytest.raises(fx.ConfigurationError, match="outside an fxdurable turn"):
        tool_context(ctx)
