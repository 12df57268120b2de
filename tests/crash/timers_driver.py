"""The timer crash tests' process (tests/crash/test_crash_timers.py): one embedded runtime on
the store ``--store`` names, an agent whose ``before_tool`` asks before ``deploy`` with
``timeout_s=60`` (``on_timeout="deny"``), and a ``deploy`` that appends to ``D/effects.log``.

``submit``: submit the turn and rest once it waits for its answer, lease free.
``resume``: start a runtime whose clock runs ``--clock-ahead`` seconds ahead of the host's (an
injected clock: the hour that passed while no worker ran) and no periodic scan, then wait for
the turn to settle; ``--answer`` first tries a person's (late) answer and prints who won.
``--scenario sleep``: the agent's one call is a durable ``nap`` tool that ``ctx.sleep``s an
hour, then appends ``napped`` to ``D/effects.log`` (the turn's budget is two hours).
``FXD_CRASH_AT`` kills the process at a named crash point, as everywhere in the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import pydantic

import fxdurable as fx

SESSION = "s"
TIMEOUT_S = 60.0


class Deploy(pydantic.BaseModel):
    version: str


class AheadClock:
    def __init__(self, ahead_s: float) -> None:
        self.ahead_s = ahead_s

    def now(self) -> float:
        return time.time() + self.ahead_s


class Nap(pydantic.BaseModel):
    seconds: float


def sleeper(world: Path) -> fx.Agent:
    @fx.tool(durable=True, timeout_s=2 * 3600)
    async def nap(inp: Nap, ctx: fx.ToolContext) -> str:
        "Sleep, durably."
        await ctx.sleep(inp.seconds)
        with (world / "effects.log").open("a") as f:
            f.write("napped\n")
        return "rested"

    model = fx.ScriptedModel([fx.reply("", fx.call("nap", seconds=3600)), fx.reply("done")])
    durability = fx.Durability(timeout_s=2 * 3600)
    return fx.Agent("eng", model, tools=[nap], durability=durability)


def agent(world: Path) -> fx.Agent:
    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy a release."
        with (world / "effects.log").open("a") as f:
            f.write(inp.version + "\n")
        return f"deployed {inp.version}"

    def before_tool(tool: str, arguments: str) -> fx.Ask | None:
        return fx.ask(f"May I run {tool}?", timeout_s=TIMEOUT_S) if tool == "deploy" else None

    model = fx.ScriptedModel(
        [fx.reply("deploying", fx.call("deploy", version="2.0")), fx.reply("done")]
    )
    return fx.Agent("eng", model, tools=[deploy], before_tool=before_tool)


async def main_async(args: argparse.Namespace) -> None:
    world = Path(args.dir)
    settings = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=600)
    clock = AheadClock(args.clock_ahead)
    make = sleeper if args.scenario == "sleep" else agent
    async with fx.Runtime([make(world)], store=args.store, settings=settings, clock=clock) as rt:
        s = rt.session(SESSION)
        if args.command == "submit" and args.scenario == "sleep":
            sub = await s.submit("nap", request_id="ship-1")
            settled = await s.wait(sub.id, timeout=20)  # a crash point ends it before
            print(f"settled {settled.status.value} {settled.result}", flush=True)
            return
        if args.command == "submit":
            sub = await s.submit("ship", request_id="ship-1")
            while (await s.question()) is None:
                await asyncio.sleep(0.01)
            print(f"asked {sub.id}", flush=True)
            return
        if args.answer:
            try:
                await s.answer(fx.allow())
                print("answer won", flush=True)
            except fx.NoPendingQuestionError:
                print("expiry won", flush=True)
        prompt = "nap" if args.scenario == "sleep" else "ship"
        sub = await s.submit(prompt, request_id="ship-1")  # idempotent: the one submitted
        settled = await s.wait(sub.id, timeout=20)
        print(f"settled {settled.status.value} {settled.result}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=("submit", "resume"))
    parser.add_argument("--store", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--clock-ahead", type=float, default=0.0)
    parser.add_argument("--answer", action="store_true")
    parser.add_argument("--scenario", choices=("ask", "sleep"), default="ask")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
