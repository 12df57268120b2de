"""The agents the RQ worker tests run in real ``fxdurable worker`` processes.

The fixture ``agents_module`` copies this file into the test's temporary directory (as
``fxd_rq_agents_<n>.py``) and puts that directory on the workers' ``PYTHONPATH``; the workers
load it with ``FXD_AGENTS=<module>:agents``. ``agents`` is a function, so every RQ work horse
calls it at the start of its job (``run_wake`` → ``load_agents``): that is where a crash plan
(below) arms or disarms the next crash.

Configuration comes from the environment of the worker:

- ``FXD_TEST_WORLD``: the outside world's directory, every line written with ``O_APPEND`` and
  fsynced: ``effects.log`` (``charge <execution_id>`` once per new idempotency key, ``deploy
  <execution_id>`` every time deploy runs), ``ledger.txt`` (the charge downstream's idempotency
  keys), ``calls.log`` (``<tool> <execution_id> <run> <pid>`` for every execution of every
  tool), ``model.log`` (``<prompt>|r<round>|<pid>`` for every request the model serves);
- ``FXD_TEST_TOOL_S`` (every tool), ``FXD_TEST_READ_S`` (read_state), ``FXD_TEST_DEPLOY_S``
  (deploy, before its effect), ``FXD_TEST_TICK_S`` (tick): how long each tool takes;
- ``FXD_TEST_AGENTS_DELAY_S``: how long :func:`agents` takes (a slow application import);
- ``FXD_TEST_CRASH_PLAN`` (``point[:tool],point[:tool],...``) with ``FXD_TEST_CRASH_LOG`` (the
  worker's stderr, where :func:`fxdurable.core.crash.crash_point` writes "crash injected at"):
  the k-th job after k injected crashes runs with ``FXD_CRASH_AT`` set to the plan's k-th entry,
  and every job after the plan is spent runs without it. So the RQ parent that survives its
  SIGKILLed horse recovers the session itself, as it would in production, instead of crashing
  again on every reconciliation wake.

The scripted model's story (prompt ``story <tag>``): ``read_state`` → ``charge`` (idempotent)
→ ``deploy`` (unsafe) → final answer ``Done: <tag>``. After a deploy whose outcome is unknown
it inspects with ``check_deploy`` and never deploys again. ``status?`` is answered after one
``read_state``. ``ticks <n> <tag>`` calls the safe ``tick`` tool ``n`` times, one per round
(a long turn for the job-deadline tests).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pydantic

import fxdurable as fx

AGENT = "rq-agent"
UNKNOWN_MARK = "may or may not have completed"
FOLLOW_UP = "status?"
CRASH_MARK = "crash injected at"


def append_line(path: Path, line: str) -> None:
    """One durable line: O_APPEND (atomic w.r.t. other appenders) and fsync before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _seconds(name: str) -> float:
    return float(os.environ.get(name) or 0.0)


class NoInput(pydantic.BaseModel):
    pass


class ChargeInput(pydantic.BaseModel):
    order: str
    amount_cents: int


class DeployInput(pydantic.BaseModel):
    version: str


class TickInput(pydantic.BaseModel):
    n: int


def build_tools(world: Path) -> list[fx.Tool]:
    effects = world / "effects.log"
    ledger = world / "ledger.txt"
    calls = world / "calls.log"

    def log_call(tool: str, ctx: fx.ToolContext) -> None:
        append_line(calls, f"{tool} {ctx.execution_id} {ctx.attempt} {os.getpid()}")

    def read_state(_: NoInput, ctx: fx.ToolContext) -> str:
        log_call("read_state", ctx)
        time.sleep(_seconds("FXD_TEST_READ_S") or _seconds("FXD_TEST_TOOL_S"))
        return "order is unpaid; production runs release 1.9"

    def charge(inp: ChargeInput, ctx: fx.ToolContext) -> str:
        # The downstream payment system: it dedupes on the idempotency key it is given.
        log_call("charge", ctx)
        time.sleep(_seconds("FXD_TEST_TOOL_S"))
        if ctx.execution_id in read_lines(ledger):
            return f"order {inp.order} was already charged (idempotency key {ctx.execution_id})"
        append_line(ledger, ctx.execution_id)
        append_line(effects, f"charge {ctx.execution_id}")
        return f"charged {inp.amount_cents} cents for order {inp.order}"

    def deploy(inp: DeployInput, ctx: fx.ToolContext) -> str:
        # No idempotency at all: every execution that gets past the sleep is a deploy.
        log_call("deploy", ctx)
        time.sleep(_seconds("FXD_TEST_DEPLOY_S") or _seconds("FXD_TEST_TOOL_S"))
        append_line(effects, f"deploy {ctx.execution_id}")
        return f"release {inp.version} deployed"

    def check_deploy(_: NoInput, ctx: fx.ToolContext) -> str:
        log_call("check_deploy", ctx)
        deploys = [line for line in read_lines(effects) if line.startswith("deploy ")]
        return f"{len(deploys)} deploy(s) on record"

    def tick(inp: TickInput, ctx: fx.ToolContext) -> str:
        log_call("tick", ctx)
        time.sleep(_seconds("FXD_TEST_TICK_S"))
        return f"tick {inp.n} done"

    return [
        fx.define_tool(
            "read_state", description="Read the state.", input_model=NoInput, execute=read_state
        ),
        fx.define_tool(
            "charge",
            description="Charge an order (the payment API dedupes on the idempotency key).",
            input_model=ChargeInput,
            execute=charge,
            replay=fx.Idempotent(),
        ),
        fx.define_tool(
            "deploy",
            description="Deploy a release to production.",
            input_model=DeployInput,
            execute=deploy,
            replay="unsafe",
        ),
        fx.define_tool(
            "check_deploy",
            description="Count the deploys production has on record.",
            input_model=NoInput,
            execute=check_deploy,
        ),
        fx.define_tool("tick", description="One slow step.", input_model=TickInput, execute=tick),
    ]


def current_turn(messages: Sequence[Any]) -> list[Any]:
    """The messages since the last user message: the current turn, as the model sees it."""
    items = list(messages)
    for i in range(len(items) - 1, -1, -1):
        if getattr(items[i], "role", None) == "user":
            return items[i:]
    return items


def policy(request: fx.ModelRequest) -> fx.ModelResponse:
    """The scripted model: reacts to the conversation, as a model would after a recovery."""
    turn = current_turn(request.messages)
    asked = getattr(turn[0], "text", "") if turn else ""
    results = [m for m in turn if getattr(m, "role", None) == "tool"]
    last = results[-1] if results else None
    if asked == FOLLOW_UP:
        if last is None:
            return fx.reply("Let me read the current state.", fx.call("read_state"))
        return fx.reply(f"Status: {last.text}")
    if asked.startswith("ticks "):
        _, count, tag = asked.split(maxsplit=2)
        if len(results) < int(count):
            return fx.reply(f"tick {len(results) + 1}", fx.call("tick", n=len(results) + 1))
        return fx.reply(f"Ticked {count} times: {tag}")
    tag = asked.removeprefix("story ").strip()
    if last is None:
        return fx.reply(f"Reading the state for {tag}.", fx.call("read_state"))
    if last.tool_name == "read_state":
        return fx.reply(f"Charging order {tag}.", fx.call("charge", order=tag, amount_cents=4200))
    if last.tool_name == "charge":
        return fx.reply(f"Deploying {tag}.", fx.call("deploy", version=tag))
    if last.tool_name == "deploy":
        if UNKNOWN_MARK in last.text:
            return fx.reply("The deploy's outcome is unknown; inspecting.", fx.call("check_deploy"))
        return fx.reply(f"Done: {tag}")
    if last.tool_name == "check_deploy":
        return fx.reply(f"Interrupted deploy of {tag}; {last.text}. I will not deploy again.")
    return fx.reply(f"Unexpected result from {last.tool_name}: {last.text}")


def logged_policy(world: Path) -> Callable[[fx.ModelRequest], fx.ModelResponse]:
    """The policy, logging each request it serves: a step served from its record never shows
    up twice in ``model.log``."""
    requests = world / "model.log"

    def logged(request: fx.ModelRequest) -> fx.ModelResponse:
        turn = current_turn(request.messages)
        asked = getattr(turn[0], "text", "") if turn else ""
        round_ = sum(1 for m in turn if getattr(m, "role", None) == "assistant")
        append_line(requests, f"{asked}|r{round_}|{os.getpid()}")
        return policy(request)

    return logged


def build_agent(world: Path) -> fx.Agent:
    return fx.Agent(
        AGENT,
        fx.ScriptedModel(logged_policy(world), name="scripted/rq"),
        instructions="You run the RQ worker tests' story.",
        tools=build_tools(world),
    )


def arm_crash_plan() -> None:
    """Set ``FXD_CRASH_AT`` for this job from the crash plan and the crashes already logged."""
    plan = [p for p in os.environ.get("FXD_TEST_CRASH_PLAN", "").split(",") if p]
    if not plan:
        return
    log = os.environ.get("FXD_TEST_CRASH_LOG")
    text = Path(log).read_text(errors="replace") if log and Path(log).exists() else ""
    done = text.count(CRASH_MARK)
    if done < len(plan):
        os.environ["FXD_CRASH_AT"] = plan[done]
    else:
        os.environ.pop("FXD_CRASH_AT", None)


def agents() -> list[fx.Agent]:
    """``FXD_AGENTS=<module>:agents``: called by every work horse at the start of its job (and
    once by the RQ parent at startup). ``FXD_TEST_AGENTS_DELAY_S`` makes it slow, as loading a
    real application can be."""
    arm_crash_plan()
    time.sleep(_seconds("FXD_TEST_AGENTS_DELAY_S"))
    world = Path(os.environ.get("FXD_TEST_WORLD") or ".")
    return [build_agent(world)]
