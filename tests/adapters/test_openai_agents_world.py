"""The OpenAI Agents SDK agent of the adapter tests.

An ordinary ``agents.Agent`` whose model is the SDK's own offline ``ScriptedModel`` (each
request answered by a responder that reads the input items, streamed by the SDK's own event
builder, an answer's text a delta per 8 characters), with the three tools of the pydantic-ai
adapter's tests (``pydai_agent.py``), writing the same outside world, so ``pydai_checks.py``
checks both adapters:

- ``read_status`` (``@replay("safe")``): a read;
- ``record_note`` (``@replay("idempotent")``): appends ``note <execution id>`` to ``notes.log``
  unless that key is there (deduplicating on the SDK's ``ToolContext.tool_call_id``), and every
  execution to ``calls.log``;
- ``deploy`` (no policy: ``unsafe``): appends ``deploy <execution id>`` to ``effects.log``.

The model behaves as ``pydai_agent.py``'s does; every request is a line in ``model.log``.
The process that runs it to rest after a crash is ``test_openai_agents_crash.py`` as a script
(``pydai_driver.py``'s run with this agent). Holds no tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel
from agents.testing import function_call as call_item
from agents.tool_context import ToolContext
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import fxdurable as fx
from fxdurable.adapters.openai_agents import durable_agent, replay, tool_context

UNKNOWN = "may or may not have completed"  # in fxdurable's unknown-outcome message


def turn_returns(items: list[Any]) -> list[tuple[str, str]]:
    """(tool, output) of each tool result since the last user message, as the model sees it."""
    names: dict[str, str] = {}
    returns: list[tuple[str, str]] = []
    for item in items:
        if item.get("role") == "user":
            returns = []
        elif item.get("type") == "function_call":
            names[item["call_id"]] = item["name"]
        elif item.get("type") == "function_call_output":
            returns.append((names.get(item["call_id"], "?"), str(item["output"])))
    return returns


def last_prompt(items: list[Any]) -> str:
    prompts = [str(i["content"]) for i in items if i.get("role") == "user"]
    return prompts[-1] if prompts else ""


def assistant_message(text: str) -> ResponseOutputMessage:
    """An answer of 8-character text parts: the SDK's stream builder sends each part as one
    ``response.output_text.delta``, as pydai_agent.py streams 8-character deltas."""
    parts = [
        ResponseOutputText(text=text[i : i + 8], type="output_text", annotations=[], logprobs=[])
        for i in range(0, len(text), 8)
    ]
    return ResponseOutputMessage(
        id="scripted-message", type="message", role="assistant", status="completed", content=parts
    )


def respond(items: list[Any]) -> list[Any]:
    """The model's output items for the input ``items`` (the pydai agent's behaviour)."""
    returns = turn_returns(items)
    call_id = f"call-{len(items)}"
    if last_prompt(items) == "status?":
        if not returns:
            return [call_item("read_status", {"region": "eu"}, call_id=call_id)]
        return [assistant_message(f"status: {returns[-1][1]}")]
    deploys = [out for name, out in returns if name == "deploy"]
    if not returns:
        return [call_item("read_status", {"region": "eu"}, call_id=call_id)]
    if len(returns) == 1:
        return [call_item("record_note", {"text": "deploying r1"}, call_id=call_id)]
    if not deploys:
        return [call_item("deploy", {"release": "r1"}, call_id=call_id)]
    if UNKNOWN in deploys[-1] and len(deploys) == 1:
        return [call_item("deploy", {"release": "r1"}, call_id=call_id)]  # blind
    if any(UNKNOWN in d for d in deploys):
        return [assistant_message("deploy outcome unknown; not repeated")]
    return [assistant_message(f"deployed: {deploys[-1]}")]


def log(world: Path, name: str, line: str) -> None:
    with (world / name).open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def sdk_agent(world: Path) -> Agent[Any]:
    """The SDK agent, as its user wrote it (nothing fxdurable in it but the policies)."""
    (world / "notes.log").touch()  # the change log the note deduplicates against

    def answer(call: ModelCall) -> list[Any]:
        items = list(call.input)
        shown = [list(r) for r in turn_returns(items)]
        # Which framework served it: the crash test's driver must run this agent.
        served = {"shown": shown, "pid": os.getpid(), "framework": "openai-agents"}
        log(world, "model.log", json.dumps(served))
        return respond(items)

    @replay("safe")
    @function_tool
    def read_status(region: str) -> str:
        """Read a region's status."""
        return f"{region}: healthy"

    @replay("idempotent")
    @function_tool
    def record_note(ctx: ToolContext[None], text: str) -> str:
        """Record a note in the change log (deduplicated on the call's key)."""
        key = ctx.tool_call_id  # fxdurable's execution id: the same on a re-run
        log(world, "calls.log", f"record_note {key}")
        if f"note {key}" not in (world / "notes.log").read_text().splitlines():
            log(world, "notes.log", f"note {key}")
        return "noted"

    @function_tool
    def deploy(ctx: ToolContext[None], release: str) -> str:
        """Deploy a release."""
        key = tool_context(ctx).execution_id
        log(world, "effects.log", f"deploy {key}")
        return f"release {release} deployed ({key})"

    return Agent(
        name="oai-ops",
        instructions="You deploy releases carefully.",
        model=ScriptedModel([ModelStep.respond(answer) for _ in range(50)]),
        tools=[read_status, record_note, deploy],
    )


def build(world: Path, durability: fx.Durability | None = None) -> fx.Agent:
    return durable_agent(sdk_agent(world), durability=durability)
