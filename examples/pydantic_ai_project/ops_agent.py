"""An ordinary pydantic-ai agent, made durable by fxdurable: it reads a region's status and
deploys a release, journaled in ``.fxd/ops.db``. Kill it at any point and run the same command
again: the turn continues from its last recorded step, and a deploy that was cut short is
never repeated blindly.

``python ops_agent.py "Deploy r1."``; the model is pydantic-ai's offline ``FunctionModel``
standing in for yours (put ``"openai:gpt-5-mini"`` or any pydantic-ai model in its place).
"""

from __future__ import annotations

import asyncio
import sys
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
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import fxdurable as fx
from fxdurable.adapters.pydantic_ai import durable_agent, replay, tool_context

DEPLOYS = Path("deploys.log")  # stands in for your deployment API


def careful_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Read the status, deploy; told the deploy's outcome is unknown, check the log."""
    results = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    if not results:
        return ModelResponse(parts=[ToolCallPart("read_status", {"region": "eu"})])
    last = results[-1]
    if last.tool_name == "read_status" and len(results) == 1:
        return ModelResponse(parts=[ToolCallPart("deploy", {"release": "r1"})])
    if last.tool_name == "deploy" and "may or may not have completed" in str(last.content):
        return ModelResponse(parts=[ToolCallPart("list_deploys", {})])
    if last.tool_name == "list_deploys":
        went = "did" if "r1" in str(last.content) else "did not"
        text = f"The interrupted deploy of r1 {went} go out; not repeated."
        return ModelResponse(parts=[TextPart(text)])
    return ModelResponse(parts=[TextPart("Deployed r1.")])


async def streamed(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    response = careful_model(messages, info)
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            yield part.content
        elif isinstance(part, ToolCallPart):
            yield {index: DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str())}


ops: Agent[None, str] = Agent(FunctionModel(careful_model, stream_function=streamed), name="ops")


@ops.tool_plain(metadata=replay("safe"))
def read_status(region: str) -> str:
    """Read a region's status."""
    return f"{region}: healthy"


@ops.tool_plain(metadata=replay("safe"))
def list_deploys() -> str:
    """List the releases deployed so far."""
    return DEPLOYS.read_text() if DEPLOYS.exists() else "(none)"


@ops.tool  # no policy: unsafe
def deploy(ctx: RunContext[None], release: str) -> str:
    """Deploy a release."""
    with DEPLOYS.open("a") as log:
        log.write(f"{release} {tool_context(ctx).execution_id}\n")
    return f"{release} deployed"


agent = durable_agent(ops, instructions="You deploy releases carefully.")


async def main(prompt: str) -> None:
    async with fx.Runtime([agent], store="sqlite:///.fxd/ops.db") as rt:
        session = rt.session("ops")
        submission = await session.submit(prompt, request_id="deploy-r1")
        done = await session.wait(submission.id)
        print(f"{done.status}: {done.result}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "Deploy r1."))
