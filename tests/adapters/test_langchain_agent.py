"""The LangChain adapter in process, and the LangChain agent its crash tests run
(``build``): LangChain's own offline ``GenericFakeChatModel``, given tool calls by subclassing
(its stream drops them), with three LangChain tools over the same outside world as the
pydantic-ai adapter's tests (``pydai_agent.py``; ``pydai_checks.py`` checks it):

- ``read_status`` (``with_replay(..., "safe")``): a read;
- ``record_note`` (``idempotent``, by ``replay=``): reads its key as an ``InjectedToolCallId``
  (fxdurable's execution id) and appends ``note <key>`` to ``notes.log`` unless it is there;
  every execution goes to ``calls.log``;
- ``deploy`` (no policy: ``unsafe``): ``tool_context(config).execution_id`` to ``effects.log``.

The model reacts to the conversation as ``pydai_agent.respond`` does (told the deploy's
outcome is unknown it repeats it once, blindly, then answers ``deploy outcome unknown; not
repeated``), and appends each request it serves to ``model.log``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolCallChunk,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from pydantic import Field

import fxdurable as fx
from fxdurable.adapters.langchain import (
    durable_agent,
    tool_context,
    with_replay,
)
from fxdurable.adapters.langchain._model import to_response
from fxdurable.errors import ConfigurationError

UNKNOWN = "may or may not have completed"  # in fxdurable's unknown-outcome message


class ToolCallingFakeChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` answering from the conversation (``respond``) with text and
    tool calls, streamed as text chunks split on whitespace then one tool-call chunk each."""

    respond: Callable[[list[BaseMessage]], AIMessage]
    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFakeChatModel:
        return self  # the fake reads no schema; fxdurable's tools validate the arguments

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        message = self.respond(messages)
        text = message.content if isinstance(message.content, str) else ""
        for token in filter(None, re.split(r"(\s)", text)):  # as GenericFakeChatModel splits
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        for index, call in enumerate(message.tool_calls):
            chunk = ToolCallChunk(
                name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index
            )
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[chunk]))


def turn_returns(messages: list[BaseMessage]) -> list[ToolMessage]:
    """The tool results since the last user message: this turn's, as the model sees them."""
    returns: list[ToolMessage] = []
    for message in messages:
        if isinstance(message, HumanMessage):
            returns = []
        elif isinstance(message, ToolMessage):
            returns.append(message)
    return returns


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"lc-{name}"}])


def respond(messages: list[BaseMessage]) -> AIMessage:
    returns = turn_returns(messages)
    prompts = [m.content for m in messages if isinstance(m, HumanMessage)]
    if prompts and prompts[-1] == "status?":  # the follow-up: one read, then the answer
        return (
            call("read_status", region="eu")
            if not returns
            else AIMessage(content=f"status: {returns[-1].content}")
        )
    deploys = [str(r.content) for r in returns if r.name == "deploy"]
    if not returns:
        return call("read_status", region="eu")
    if len(returns) == 1:
        return call("record_note", text="deploying r1")
    if not deploys or (UNKNOWN in deploys[-1] and len(deploys) == 1):
        return call("deploy", release="r1")  # the second time: a blind repeat
    if any(UNKNOWN in d for d in deploys):
        return AIMessage(content="deploy outcome unknown; not repeated")
    return AIMessage(content=f"deployed: {deploys[-1]}")


def build(world: Path, durability: fx.Durability | None = None) -> fx.Agent:
    model, tools = world_parts(world)
    return durable_agent(
        model,
        tools,
        name="lc-ops",
        system_prompt="You deploy releases carefully.",
        replay={"record_note": "idempotent"},
        durability=durability,
    )


def world_parts(world: Path) -> tuple[ToolCallingFakeChatModel, list[BaseTool]]:
    """The crash matrix's chat model and tools over ``world`` (``read_status`` marked safe;
    ``record_note`` is given ``idempotent`` by the agent's ``replay=``)."""
    (world / "notes.log").touch()  # the change log the note deduplicates against

    def log(name: str, line: str) -> None:
        with (world / name).open("a") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def logged(messages: list[BaseMessage]) -> AIMessage:
        shown = [[r.name, str(r.content)] for r in turn_returns(messages)]
        # Which framework served it: the crash test's driver must run this agent.
        served = {"shown": shown, "pid": os.getpid(), "framework": "langchain"}
        log("model.log", json.dumps(served))
        return respond(messages)

    @tool
    def read_status(region: str) -> str:
        """Read a region's status."""
        return f"{region}: healthy"

    @tool
    def record_note(text: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Record a note in the change log (deduplicated on the call's key)."""
        log("calls.log", f"record_note {tool_call_id}")  # fxdurable's execution id
        if f"note {tool_call_id}" not in (world / "notes.log").read_text().splitlines():
            log("notes.log", f"note {tool_call_id}")
        return "noted"

    @tool
    def deploy(release: str, config: RunnableConfig) -> str:
        """Deploy a release."""
        key = tool_context(config).execution_id
        log("effects.log", f"deploy {key}")
        return f"release {release} deployed ({key})"

    return ToolCallingFakeChatModel(respond=logged), [
        with_replay(read_status, "safe"),
        record_note,
        deploy,
    ]


def test_policies_come_from_metadata_and_replay_and_default_to_unsafe(tmp_path: Path) -> None:
    agent = build(tmp_path)
    assert {t.name: t.policy for t in agent.tools} == {
        "read_status": "safe",
        "record_note": "idempotent",
        "deploy": "unsafe",
    }
    # The schema LangChain sends a provider: injected arguments (the call id, the config)
    # are not the model's to fill.
    assert agent.tool("record_note").json_schema()["properties"] == {  # type: ignore[union-attr]
        "text": {"type": "string"}
    }
    assert agent.tool("deploy").json_schema()["required"] == ["release"]  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [True, False])
def test_a_turn_runs_the_tools_with_the_execution_id_as_their_call_id(
    tmp_path: Path, stream: bool
) -> None:
    seen: list[list[str]] = []
    keys: list[tuple[str, str]] = []

    def answer(messages: list[BaseMessage]) -> AIMessage:
        seen.append([type(m).__name__ for m in messages])
        if not turn_returns(messages):
            return call("deploy", release="r2")
        return AIMessage(content=f"done: {turn_returns(messages)[-1].content}")

    async def deploy(
        release: str, config: RunnableConfig, call_id: Annotated[str, InjectedToolCallId]
    ) -> str:
        """Deploy a release."""
        keys.append((tool_context(config).execution_id, call_id))
        return f"{release} deployed"

    agent = durable_agent(
        ToolCallingFakeChatModel(respond=answer),
        [deploy],  # a plain (async) function, made a LangChain tool as create_agent does
        name="plain",
        system_prompt="Be careful.",
        stream=stream,
        durability=fx.Durability(partial_text_every_s=0.0),  # every delta a partial
    )
    assert agent.tool("deploy").policy == "unsafe"  # type: ignore[union-attr]

    async def main() -> tuple[str, list[fx.EventRecord]]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("plain-1")
            return await session.run("deploy r2"), await session.events()

    text, events = asyncio.run(main())
    assert text == "done: r2 deployed"
    assert seen == [
        ["SystemMessage", "HumanMessage"],
        ["SystemMessage", "HumanMessage", "AIMessage", "ToolMessage"],
    ]
    ((execution_id, call_id),) = keys
    assert execution_id == call_id and execution_id  # the key reaches the tool both ways
    partials = [e.data["text"] for e in events if e.type == "model.partial"]
    # Streamed, each whitespace-split delta reaches the event log the HTTP stream sends.
    assert partials == (["done:", " ", "r2", " ", "deployed"] if stream else [])


def test_bad_arguments_and_unknown_policies_are_refused(tmp_path: Path) -> None:
    agent = build(tmp_path)
    with pytest.raises(fx.ToolInputError, match="release"):
        agent.tool("deploy").parse('{"release": 3}')  # type: ignore[union-attr]
    with pytest.raises(ConfigurationError, match="lacks"):
        durable_agent(ToolCallingFakeChatModel(respond=respond), [], name="x", replay={"y": "safe"})
    with pytest.raises(ConfigurationError, match="replay policy"):
        with_replay(tool(lambda q: q, description="q"), "maybe")  # type: ignore[arg-type]


def test_a_reply_is_recorded_with_its_calls_usage_and_finish_reason() -> None:
    reply = AIMessage(
        content=[{"type": "text", "text": "deploying"}, {"type": "reasoning", "reasoning": "x"}],
        tool_calls=[{"name": "deploy", "args": {"release": "r1"}, "id": "call_1"}],
        invalid_tool_calls=[{"name": "deploy", "args": '{"release": ', "id": "call_2"}],
        usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
        response_metadata={"finish_reason": "tool_calls"},
    )
    recorded = to_response(reply)
    assert recorded.text == "deploying"
    assert [(c.name, c.arguments, c.provider_id) for c in recorded.tool_calls] == [
        ("deploy", '{"release":"r1"}', "call_1"),
        ("deploy", '{"release": ', "call_2"),  # fails validation; the model reads why
    ]
    assert (recorded.usage.input_tokens, recorded.usage.output_tokens) == (12, 5)
    assert (recorded.stop_reason, recorded.stop_inferred) == ("tool_calls", False)
    assert to_response(AIMessage(content="hi")).stop_inferred
