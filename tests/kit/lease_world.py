"""The lost-lease world: an unsafe deploy that outlives a store outage (docs/leases.md).

Prompt ``deploy <op> <kind>``: the scripted model calls ``deploy_<kind>(op)``. ``kind`` is
``sync`` (a blocking ``def``: its thread ignores cancellation) or ``async`` (an ``async def``
that catches its cancellation and goes on: the worst an async tool can do); ``safe`` (a
blocking one declared safe to repeat), ``timeout`` (a blocking one with a short ``timeout_s``)
or ``step`` (a durable tool whose sync ``ctx.step`` outlives its ``timeout_s``): a call that
timed out ends the turn. Prompt ``ensure <op>``: the model checks first, deploys if absent.
Each deploy takes ``FXD_TEST_DEPLOY_S`` seconds *before* its effect (the first deploy of an
operation; a later one is quick), so a store outage that starts as it starts outlives the lease
while it is still in flight. After an ``outcome_unknown`` the model checks
(``check``: reads the ledger), and if the effect is absent it deploys again, deliberately (its
first repeat is refused: DESIGN §3.5). So if a stale worker's deploy lands after the check, the
ledger shows two effects of one operation: the defect of issue 22 §1.

The outside world (``FXD_TEST_WORLD``), every line fsynced: ``effects.log`` has
``<op> <execution_id> <pid>`` per effect; ``calls.log`` ``start|end <op> <execution_id> <pid>``.

``python -m tests.kit.lease_world --store URL [--submit SESSION PROMPT REQUEST_ID]`` runs an
embedded :class:`fxdurable.Runtime` (local queue) until SIGTERM, with the lease settings of
``FXD_LEASE_TTL_S`` and friends: one worker of the embedded pair.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import time
from pathlib import Path

import pydantic

import fxdurable as fx
from tests.kit.story import UNKNOWN_MARK, append_line, current_turn, read_lines
from tests.kit.world_env import world_from_env

READY = "embedded runtime ready"
_PROMPT = re.compile(r"(deploy|ensure) (\S+) ?(sync|async|safe|timeout|step)?")
#: The ``timeout_s`` of ``deploy_timeout`` and ``deploy_step``: far shorter than their hold.
CALL_TIMEOUT_S = 0.5


class Op(pydantic.BaseModel):
    op: str


def effects(world: Path, op: str | None = None) -> list[tuple[str, str, int]]:
    """``(op, execution_id, pid)`` of every effect in the ledger (of ``op`` only, if given)."""
    rows = [line.split() for line in read_lines(world / "effects.log")]
    return [(r[0], r[1], int(r[2])) for r in rows if op is None or r[0] == op]


def calls(world: Path, what: str, op: str) -> list[tuple[str, int]]:
    """``(execution_id, pid)`` of every ``start`` or ``end`` of a deploy of ``op``."""
    rows = [line.split() for line in read_lines(world / "calls.log")]
    return [(r[2], int(r[3])) for r in rows if r[0] == what and r[1] == op]


def lease_agent(world: Path, deploy_s: float) -> fx.Agent:
    def hold_s(op: str) -> float:
        """The first deploy of an operation holds for ``deploy_s``, a later one briefly (the
        deliberate redeploy needs no outage to outlive)."""
        return deploy_s if len(calls(world, "start", op)) <= 1 else 0.1

    def log_call(what: str, op: str, ctx: fx.ToolContext) -> None:
        append_line(world / "calls.log", f"{what} {op} {ctx.execution_id} {os.getpid()}")

    def effect(op: str, ctx: fx.ToolContext) -> str:
        append_line(world / "effects.log", f"{op} {ctx.execution_id} {os.getpid()}")
        log_call("end", op, ctx)
        return f"deployed {op}"

    @fx.tool(replay="unsafe")
    def deploy_sync(inp: Op, ctx: fx.ToolContext) -> str:
        "Deploy (blocking; not safe to repeat)."
        log_call("start", inp.op, ctx)
        time.sleep(hold_s(inp.op))  # uncooperative: never looks at ctx.lease
        return effect(inp.op, ctx)

    @fx.tool(replay="unsafe")
    async def deploy_async(inp: Op, ctx: fx.ToolContext) -> str:
        "Deploy (async, and deaf to its cancellation; not safe to repeat)."
        log_call("start", inp.op, ctx)
        until = time.monotonic() + hold_s(inp.op)
        while (left := until - time.monotonic()) > 0:
            try:
                await asyncio.sleep(left)
            except asyncio.CancelledError:
                continue  # swallowed: the worst an async tool can do
        return effect(inp.op, ctx)

    @fx.tool(replay="safe")
    def deploy_safe(inp: Op, ctx: fx.ToolContext) -> str:
        "Deploy (blocking; declared safe to repeat, so an abort records it cancelled)."
        log_call("start", inp.op, ctx)
        time.sleep(hold_s(inp.op))
        return effect(inp.op, ctx)

    @fx.tool(replay="unsafe", timeout_s=CALL_TIMEOUT_S)
    def deploy_timeout(inp: Op, ctx: fx.ToolContext) -> str:
        "Deploy (blocking, outlives its timeout_s; not safe to repeat)."
        log_call("start", inp.op, ctx)
        time.sleep(hold_s(inp.op))
        return effect(inp.op, ctx)

    @fx.tool(durable=True, timeout_s=CALL_TIMEOUT_S)
    async def deploy_step(inp: Op, ctx: fx.ToolContext) -> str:
        "Deploy as a durable tool whose sync step outlives the call's timeout_s."

        def apply() -> str:
            log_call("start", inp.op, ctx)
            time.sleep(hold_s(inp.op))
            return effect(inp.op, ctx)

        return await ctx.step("apply", apply)

    @fx.tool
    def check(inp: Op, ctx: fx.ToolContext) -> str:
        "How many times the operation took effect."
        return f"{len(effects(world, inp.op))} effect(s) of {inp.op}"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        turn = current_turn(request.messages)
        prompt = getattr(turn[0], "text", "") if turn else ""
        asked = _PROMPT.fullmatch(prompt)
        if asked is None:
            return fx.reply(f"not a deploy: {prompt!r}")
        verb, op, kind = asked[1], asked[2], asked[3] or "sync"
        deploy = fx.call(f"deploy_{kind}", op=op)
        results = [m for m in turn if getattr(m, "role", None) == "tool"]
        last = results[-1] if results else None
        if last is None and verb == "ensure":  # look before deploying
            return fx.reply(f"checking {op}", fx.call("check", op=op))
        if last is None:
            return fx.reply(f"deploying {op}", deploy)
        if "timed out" in last.text:  # a later turn ensures it
            return fx.reply(f"{op} timed out: leaving it for now")
        if last.tool_name == "check":
            if last.text.startswith("0 "):
                return fx.reply(f"{op} is absent: deploying it deliberately", deploy)
            return fx.reply(f"{op} is deployed already")
        if "Refused" in last.text:
            return fx.reply(f"checked: asking for {op} again", deploy)
        if UNKNOWN_MARK in last.text:
            return fx.reply(f"{op} was interrupted: checking", fx.call("check", op=op))
        return fx.reply(f"done: {last.text}")

    return fx.Agent(
        "lease-agent",
        fx.ScriptedModel(policy),
        tools=[deploy_sync, deploy_async, deploy_safe, deploy_timeout, deploy_step, check],
        parallel_tools=False,
    )


def agents(world: Path | None = None, deploy_s: float | None = None) -> list[fx.Agent]:
    """``FXD_AGENTS=<module>:agents`` in worker processes (see ``tests/workers/lease_agents``),
    where the world and the deploy's hold come from the environment; a test's own process
    (which admits the prompts) names them."""
    if deploy_s is None:
        deploy_s = float(os.environ.get("FXD_TEST_DEPLOY_S") or 0)
    return [lease_agent(world or world_from_env(), deploy_s)]


async def _serve(store: str, submit: list[str] | None) -> None:
    settings = fx.WorkerSettings.from_env()
    grace_s = float(os.environ.get("FXD_TEST_GRACE_S") or 10)
    async with fx.Runtime(agents(), store=store, settings=settings, shutdown_grace_s=grace_s) as rt:
        rt.install_signal_handlers()
        if submit:
            session, prompt, request_id = submit
            await rt.session(session).submit(prompt, request_id=request_id)
        print(READY, flush=True)
        while not rt.stop_requested:
            await asyncio.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--submit", nargs=3, metavar=("SESSION", "PROMPT", "REQUEST_ID"))
    args = parser.parse_args()
    asyncio.run(_serve(args.store, args.submit))


if __name__ == "__main__":
    main()
