"""An ordinary OpenAI Agents SDK agent, made durable by fxdurable: it reads a region's status
and deploys a release, journaled in ``.fxd/ops.db``. Kill it at any point and run the same
command again: the turn continues from its last recorded step, and a deploy that was cut short
is never repeated blindly.

``python ops_agent.py "Deploy r1."``; the model is the SDK's offline ``ScriptedModel`` answering
from the conversation, standing in for yours (put ``model="gpt-5-mini"`` or any SDK ``Model``
in its place).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

import fxdurable as fx
from fxdurable.adapters.openai_agents import durable_agent, replay, tool_context

DEPLOYS = Path("deploys.log")  # stands in for your deployment API


def careful_reply(call: ModelCall) -> list[Any]:
    """Read the status, deploy; told the deploy's outcome is unknown, check the log."""
    names = {i["call_id"]: i["name"] for i in call.input if i.get("type") == "function_call"}
    results = [
        (names[i["call_id"]], str(i["output"]))
        for i in call.input
        if i.get("type") == "function_call_output"
    ]
    step = f"c{len(results)}"
    if not results:
        return [function_call("read_status", {"region": "eu"}, call_id=step)]
    tool, output = results[-1]
    if tool == "read_status" and len(results) == 1:
        return [function_call("deploy", {"release": "r1"}, call_id=step)]
    if tool == "deploy" and "may or may not have completed" in output:
        return [function_call("list_deploys", {}, call_id=step)]
    if tool == "list_deploys":
        went = "did" if "r1" in output else "did not"
        return [assistant_message(f"The interrupted deploy of r1 {went} go out; not repeated.")]
    return [assistant_message("Deployed r1.")]


@replay("safe")  # a read: re-run after a crash
@function_tool
def read_status(region: str) -> str:
    """Read a region's status."""
    return f"{region}: healthy"


@replay("safe")
@function_tool
def list_deploys() -> str:
    """List the releases deployed so far."""
    return DEPLOYS.read_text() if DEPLOYS.exists() else "(none)"


@function_tool  # no policy: unsafe, never re-run blindly
def deploy(ctx: ToolContext[None], release: str) -> str:
    """Deploy a release."""
    with DEPLOYS.open("a") as log:
        log.write(f"{release} {tool_context(ctx).execution_id}\n")
    return f"{release} deployed"


ops = Agent(
    name="ops",
    instructions="You deploy releases carefully.",
    model=ScriptedModel([ModelStep.respond(careful_reply) for _ in range(10)]),
    tools=[read_status, list_deploys, deploy],
)
agent = durable_agent(ops)


async def main(prompt: str) -> None:
    async with fx.Runtime([agent], store="sqlite:///.fxd/ops.db") as rt:
        session = rt.session("ops")
        submission = await session.submit(prompt, request_id="deploy-r1")
        done = await session.wait(submission.id)
        print(f"{done.status}: {done.result}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "Deploy r1."))
