"""A pydantic-ai agent whose one tool is external (``ExternalToolset``): ``price_quote`` is
priced outside the agent. Its model (pydantic-ai's ``FunctionModel``) asks for a quote of
``A1``, then answers with what it read: ``quote: <result>``. Each request it serves is a
line of ``model.log`` (the tool results it was shown, this process's pid).

Run as a script it is the crash tests' driver, one real process per step:
``python pydai_external.py --store URL --dir WORLD`` submits ``quote A1`` (request id
``ex-1``) to session ``s``, waits until the turn asks for the quote's result, prints
``question <json>`` and SIGKILLs itself (a worker gone while the session is parked; with
``FXD_CRASH_AT=input.after-request:price_quote`` it dies earlier, still holding the lease);
``--answer JSON`` answers with ``tool_result(value)``, waits for the turn to settle and prints
``outcome <json>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset

import fxdurable as fx
from fxdurable.adapters.pydantic_ai import durable_agent, tool_result

QUOTE = ToolDefinition(
    name="price_quote",
    description="Quote a price for a SKU (priced outside the agent).",
    parameters_json_schema={
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"],
    },
)


def build(world: Path) -> fx.Agent:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown = [
            [part.tool_name, str(part.content)]
            for message in messages
            for part in message.parts
            if part.part_kind == "tool-return"
        ]
        with (world / "model.log").open("a") as out:
            out.write(json.dumps({"shown": shown, "pid": os.getpid()}) + "\n")
        if not shown:
            return ModelResponse(parts=[ToolCallPart("price_quote", {"sku": "A1"})])
        return ModelResponse(parts=[TextPart(f"quote: {shown[-1][1]}")])

    agent = Agent(
        FunctionModel(respond),
        name="pricing",
        toolsets=[ExternalToolset([QUOTE])],
        # What a pydantic-ai agent with external tools declares; under fxdurable the run
        # never ends with DeferredToolRequests (the call asks for its result instead).
        output_type=[str, DeferredToolRequests],
    )
    return durable_agent(agent, stream=False)


async def asked(session: fx.SessionHandle) -> fx.Question:
    """The question the session's turn parks on, once it is recorded."""
    while True:
        question = await session.question()
        if question is not None:
            return question
        await asyncio.sleep(0.02)


async def main(args: argparse.Namespace) -> None:
    settings = fx.WorkerSettings(lease_ttl_s=2.0, heartbeat_s=0.5, scan_interval_s=0.2)
    world = Path(args.dir)
    async with fx.Runtime([build(world)], store=args.store, settings=settings) as rt:
        session = rt.session("s")
        if args.answer is None:
            await session.submit("quote A1", request_id="ex-1")
            question = await asyncio.wait_for(asked(session), timeout=20)
            print("question " + json.dumps(question.question), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # gone while parked: no cleanup at all
        sub = await session.answer(tool_result(json.loads(args.answer)))
        done = await session.wait(sub.id, timeout=30)
        outcome = {"status": str(done.status), "text": done.result}
        print("outcome " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--answer")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
