"""The soak's agent: a scripted model (offline) and tools of every replay policy, sync and
async, short and long, each keeping its effect ledger (:mod:`bench.soak.ledger`).

Workers load it with ``FXD_AGENTS=bench.soak.agent:agents``; the outside world's directory is
``SOAK_WORLD``. A prompt is a plan: ``soak <id>: <tool>:<hold_s> <tool>:<hold_s> ...``. The
model calls the plan's tools one per round, step ``i`` with the operation key ``<id>.<i>``
and its hold, and ends with ``soak <id> done``. After an unknown outcome it does what DESIGN
§3.5 asks of a model: it inspects (``inspect``, which reads the ledger), moves on if the
operation took effect, and otherwise asks for the same call again, twice when the first
repeat is refused. That is the sequence in which a late effect of a lost owner (issue 22 §1)
shows as two effects of one operation.

| tool | policy | kind | effect |
|---|---|---|---|
| ``look`` | safe | sync | none (a read) |
| ``inspect`` | safe | sync | none (reads whether an operation took effect) |
| ``reserve`` | idempotent | sync | checks its execution id, holds, appends |
| ``book`` | idempotent | async | the same with ``await`` |
| ``deploy`` | unsafe | sync | holds, appends |
| ``notify`` | unsafe | async | the same with ``await`` |

The idempotent downstream checks its key before the hold and applies after it, as one that
dedupes at request start: two live executions of one call both apply, so the ledger shows any
overlap of two owners' runs of one call, which recovery's sequential re-runs never produce.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pydantic

import fxdurable as fx
from bench.soak.ledger import CALLS, EFFECTS, LedgerEntry, append_json, read_jsonl
from fxdurable.runtime.models.base import ChatMessage, without_interruptions

__all__ = ["POLICIES", "SYNC", "Step", "agents", "done_text", "plan_prompt", "soak_agent"]

AGENT = "soak"
POLICIES = {
    "look": "safe",
    "inspect": "safe",
    "reserve": "idempotent",
    "book": "idempotent",
    "deploy": "unsafe",
    "notify": "unsafe",
}
SYNC = {
    "look": True,
    "inspect": True,
    "reserve": True,
    "book": False,
    "deploy": True,
    "notify": False,
}
UNKNOWN_MARK = "may or may not have completed"
REFUSED_MARK = "Refused:"
_PROMPT = re.compile(r"soak (\S+): (.+)")


@dataclass(frozen=True, slots=True)
class Step:
    tool: str
    hold_s: float


def plan_prompt(plan_id: str, steps: Sequence[Step]) -> str:
    return f"soak {plan_id}: " + " ".join(f"{s.tool}:{s.hold_s:g}" for s in steps)


def done_text(plan_id: str) -> str:
    return f"soak {plan_id} done"


def parse_prompt(prompt: str) -> tuple[str, list[Step]] | None:
    found = _PROMPT.fullmatch(prompt.strip())
    if found is None:
        return None
    steps = []
    for item in found[2].split():
        tool, _, hold = item.partition(":")
        steps.append(Step(tool, float(hold or 0)))
    return found[1], steps


class OpInput(pydantic.BaseModel):
    op: str
    hold_s: float = 0.0


class InspectInput(pydantic.BaseModel):
    op: str


def _current_turn(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    items = without_interruptions(messages)
    for i in range(len(items) - 1, -1, -1):
        if items[i].role == "user":
            return items[i:]
    return items


def policy(request: fx.ModelRequest) -> fx.ModelResponse:
    """The next step of the plan, from the tool results of the current turn."""
    turn = _current_turn(request.messages)
    parsed = parse_prompt(turn[0].text) if turn else None
    if parsed is None:
        return fx.reply("I only run soak plans.")
    plan_id, steps = parsed
    index, need = 0, "run"
    for message in (m for m in turn if m.role == "tool"):
        if message.tool_name == "inspect":
            # Present: the operation took effect, move on. Absent: run it again.
            index, need = (index + 1, "run") if message.text.endswith("present") else (index, "run")
        elif message.text.startswith(REFUSED_MARK):
            need = "run"  # checked, and still wanted: ask for the same call again
        elif UNKNOWN_MARK in message.text:
            need = "inspect"
        else:
            index, need = index + 1, "run"
    if index >= len(steps):
        return fx.reply(done_text(plan_id))
    op = f"{plan_id}.{index}"
    if need == "inspect":
        return fx.reply(f"Checking whether {op} happened.", fx.call("inspect", op=op))
    step = steps[index]
    return fx.reply(f"Step {op}.", fx.call(step.tool, op=op, hold_s=step.hold_s))


def _tools(world: Path) -> list[fx.Tool]:
    effects, calls = world / EFFECTS, world / CALLS

    def started(tool: str, inp: OpInput | InspectInput, ctx: fx.ToolContext) -> None:
        hold = getattr(inp, "hold_s", 0.0)
        append_json(
            calls,
            {
                "tool": tool,
                "policy": POLICIES[tool],
                "sync": SYNC[tool],
                "exec": ctx.execution_id,
                "op": inp.op,
                "hold": hold,
                "pid": os.getpid(),
                "start": time.time(),
            },
        )

    def effect(tool: str, inp: OpInput, ctx: fx.ToolContext, *, noop: bool = False) -> None:
        record: dict[str, Any] = {"tool": tool, "policy": POLICIES[tool], "exec": ctx.execution_id}
        record |= {"op": inp.op, "pid": os.getpid(), "t": time.time()}
        append_json(effects, record | ({"noop": True} if noop else {}))

    def applied(execution_id: str) -> bool:
        return any(
            e.execution_id == execution_id and not e.noop
            for e in map(LedgerEntry.parse, read_jsonl(effects))
        )

    def look(inp: OpInput, ctx: fx.ToolContext) -> str:
        started("look", inp, ctx)
        time.sleep(inp.hold_s)
        return f"{len(read_jsonl(effects))} ledger lines"

    def inspect(inp: InspectInput, ctx: fx.ToolContext) -> str:
        started("inspect", inp, ctx)
        done = any(
            e.op == inp.op and not e.noop for e in map(LedgerEntry.parse, read_jsonl(effects))
        )
        return f"operation {inp.op}: " + ("present" if done else "absent")

    def reserve(inp: OpInput, ctx: fx.ToolContext) -> str:
        started("reserve", inp, ctx)
        seen = applied(ctx.execution_id)
        time.sleep(inp.hold_s)
        effect("reserve", inp, ctx, noop=seen)
        return f"reserved {inp.op}" + (" (already)" if seen else "")

    async def book(inp: OpInput, ctx: fx.ToolContext) -> str:
        started("book", inp, ctx)
        seen = applied(ctx.execution_id)
        await asyncio.sleep(inp.hold_s)
        effect("book", inp, ctx, noop=seen)
        return f"booked {inp.op}" + (" (already)" if seen else "")

    def deploy(inp: OpInput, ctx: fx.ToolContext) -> str:
        started("deploy", inp, ctx)
        time.sleep(inp.hold_s)
        effect("deploy", inp, ctx)
        return f"deployed {inp.op}"

    async def notify(inp: OpInput, ctx: fx.ToolContext) -> str:
        started("notify", inp, ctx)
        await asyncio.sleep(inp.hold_s)
        effect("notify", inp, ctx)
        return f"notified {inp.op}"

    def tool(
        name: str,
        fn: Callable[[Any, fx.ToolContext], Any],
        model: type[pydantic.BaseModel] = OpInput,
    ) -> fx.Tool:
        replay = cast(fx.ReplayPolicy, POLICIES[name])
        return fx.define_tool(
            name,
            description=f"The soak's {replay} tool {name}.",
            input_model=model,
            execute=fn,
            replay=replay,
        )

    return [
        tool("look", look),
        tool("inspect", inspect, InspectInput),
        tool("reserve", reserve),
        tool("book", book),
        tool("deploy", deploy),
        tool("notify", notify),
    ]


def soak_agent(world: Path) -> fx.Agent:
    return fx.Agent(
        AGENT,
        fx.ScriptedModel(policy, name="scripted/soak"),
        instructions="You run the soak's plans.",
        tools=_tools(world),
    )


def agents() -> list[fx.Agent]:
    """``FXD_AGENTS=bench.soak.agent:agents``; the world directory is ``SOAK_WORLD``."""
    return [soak_agent(Path(os.environ.get("SOAK_WORLD") or "."))]
