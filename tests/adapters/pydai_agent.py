"""The pydantic-ai agent of the adapter tests: an ordinary ``pydantic_ai.Agent`` driven by
pydantic-ai's own offline ``FunctionModel`` (streamed), with three tools.

- ``read_status`` (``safe``, ``metadata=replay("safe")``): a read;
- ``record_note`` (``idempotent``): appends ``note <execution id>`` to ``notes.log`` unless
  that key is there already (a downstream system that deduplicates on the key), and every
  execution to ``calls.log``;
- ``deploy`` (no policy: ``unsafe``): appends ``deploy <execution id>`` to ``effects.log``.

The model reacts to the conversation, as a real one would after a recovery: it reads the
status, records a note, deploys; told the deploy's outcome is unknown it repeats the deploy
once (a blind repeat, which fxdurable refuses) and then answers ``deploy outcome unknown``;
after a deploy that returned it answers ``deployed``. Prompted ``status?`` (the follow-up), it
reads the status and answers ``status: ...``. Every request it serves is appended
to ``model.log`` (one JSON line: the tool results it was shown, this process's pid, the
framework).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import fxdurable as fx
from fxdurable.adapters.pydantic_ai import durable_agent, replay, tool_context

UNKNOWN = "may or may not have completed"  # in fxdurable's unknown-outcome message


def turn_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results since the last user prompt: this turn's, as the model sees them."""
    returns: list[ToolReturnPart] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                returns = []
            elif isinstance(part, ToolReturnPart):
                returns.append(part)
    return returns


def last_prompt(messages: list[ModelMessage]) -> str:
    prompts = [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    return prompts[-1] if prompts else ""


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = turn_returns(messages)
    if last_prompt(messages) == "status?":  # the follow-up: one read, then the answer
        if not returns:
            return ModelResponse(parts=[ToolCallPart("read_status", {"region": "eu"})])
        return ModelResponse(parts=[TextPart(f"status: {returns[-1].content}")])
    deploys = [str(r.content) for r in returns if r.tool_name == "deploy"]
    if not returns:
        return ModelResponse(parts=[ToolCallPart("read_status", {"region": "eu"})])
    if len(returns) == 1:
        return ModelResponse(parts=[ToolCallPart("record_note", {"text": "deploying r1"})])
    if not deploys:
        return ModelResponse(parts=[ToolCallPart("deploy", {"release": "r1"})])
    if UNKNOWN in deploys[-1] and len(deploys) == 1:
        return ModelResponse(parts=[ToolCallPart("deploy", {"release": "r1"})])  # blind
    if any(UNKNOWN in d for d in deploys):
        return ModelResponse(parts=[TextPart("deploy outcome unknown; not repeated")])
    return ModelResponse(parts=[TextPart(f"deployed: {deploys[-1]}")])


def log(world: Path, name: str, line: str) -> None:
    with (world / name).open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def function_model(world: Path) -> FunctionModel:
    """The model of the matrix: ``respond``, streamed, each request a line in ``model.log``."""

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        shown = [[r.tool_name, str(r.content)] for r in turn_returns(messages)]
        # Which framework served it: each crash test checks its driver ran its agent.
        log(
            world,
            "model.log",
            json.dumps({"shown": shown, "pid": os.getpid(), "framework": "pydantic-ai"}),
        )
        response = respond(messages, info)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                for start in range(0, len(part.content), 8):
                    yield part.content[start : start + 8]
            elif isinstance(part, ToolCallPart):
                yield {
                    index: DeltaToolCall(
                        name=part.tool_name,
                        json_args=part.args_as_json_str(),
                        tool_call_id=part.tool_call_id,
                    )
                }

    return FunctionModel(respond, stream_function=stream)


def build(world: Path, durability: fx.Durability | None = None) -> fx.Agent:
    (world / "notes.log").touch()  # the change log the note deduplicates against
    agent = Agent(function_model(world), name="pydai-ops")

    @agent.tool_plain(metadata=replay("safe"))
    def read_status(region: str) -> str:
        """Read a region's status."""
        return f"{region}: healthy"

    @agent.tool(metadata=replay("idempotent"))
    def record_note(ctx: RunContext[None], text: str) -> str:
        """Record a note in the change log (deduplicated on the call's key)."""
        key = ctx.tool_call_id  # fxdurable's execution id: the same on a re-run
        log(world, "calls.log", f"record_note {key}")
        # The change log deduplicates on the key, as an idempotent API does.
        if f"note {key}" not in (world / "notes.log").read_text().splitlines():
            log(world, "notes.log", f"note {key}")
        return "noted"

    @agent.tool
    def deploy(ctx: RunContext[None], release: str) -> str:
        """Deploy a release."""
        key = tool_context(ctx).execution_id
        log(world, "effects.log", f"deploy {key}")
        return f"release {release} deployed ({key})"

    return durable_agent(
        agent, instructions="You deploy releases carefully.", durability=durability
    )
