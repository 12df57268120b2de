"""The demo's agent: a release engineer with a safe test run, an UNSAFE deploy, and a check.

``deploy`` appends one line per deploy, with its execution id, to the store's ledger (the
outside world, :mod:`fxdurable.cli.demo_ledger`); ``check_deployment`` reads it and, after an
interrupted deploy, says whether that very call is on record. The scripted model's words
follow the check: after an unknown deploy it inspects production, and deploys again only if
the interrupted call never ran.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pydantic

from fxdurable.cli.demo_ledger import LedgerEntry, append_deploy, ledger_path, read_ledger
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.models.base import Model, ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import ScriptedModel, call, reply, turn_messages
from fxdurable.runtime.tools import Tool, ToolContext, define_tool

__all__ = ["FOLLOW_UP", "PROMPT", "RELEASE", "TOOL_NAMES", "agents", "engineer", "policy"]

RELEASE = "1.4"
PROMPT = f"Ship release {RELEASE} to production."
FOLLOW_UP = f"Is release {RELEASE} live in production?"
# What check_deployment says of an interrupted deploy; the scripted model's words follow it.
RAN = "is in the deployments ledger"
TOOL_NAMES = ("run_tests", "deploy", "check_deployment")
NEVER_RAN = "is not in the deployments ledger: it never ran"


class NoInput(pydantic.BaseModel):
    pass


class DeployInput(pydantic.BaseModel):
    version: str = pydantic.Field(description="the release to deploy, e.g. 1.4")


def _tools(workdir: Path, pace_s: float = 0.2) -> list[Tool]:
    def ledger(ctx: ToolContext) -> Path:
        return ledger_path(workdir, ctx.records.url if ctx.records is not None else None)

    def run_tests(_: NoInput, ctx: ToolContext) -> str:
        time.sleep(pace_s)
        return "128 passed, 0 failed"

    def deploy(inp: DeployInput, ctx: ToolContext) -> str:
        time.sleep(pace_s)
        append_deploy(ledger(ctx), release=inp.version, execution_id=ctx.execution_id)
        return f"release {inp.version} deployed to production"

    def check_deployment(_: NoInput, ctx: ToolContext) -> str:
        return _check(read_ledger(ledger(ctx)), _interrupted_deploy(ctx))

    return [
        define_tool(
            "run_tests", description="Run the test suite.", input_model=NoInput, execute=run_tests
        ),
        define_tool(
            "deploy",
            description="Deploy a release to production.",
            input_model=DeployInput,
            execute=deploy,
            replay="unsafe",
        ),
        define_tool(
            "check_deployment",
            description="Inspect which release production runs.",
            input_model=NoInput,
            execute=check_deployment,
            reuse=False,
        ),
    ]


def _interrupted_deploy(ctx: ToolContext) -> str | None:
    """The execution id of this turn's latest deploy whose outcome is unknown, if any: the
    call a check after a crash is about (read from the store, as the runtime recorded it)."""
    if ctx.records is None:
        return None
    tasks = ctx.records.tool_tasks(ctx.turn_id)  # by (round, index)
    unknown = [
        task.execution_id
        for task in tasks
        if task.tool == "deploy" and task.status == ToolTaskStatus.OUTCOME_UNKNOWN
    ]
    return unknown[-1] if unknown else None


def _check(entries: list[LedgerEntry], interrupted: str | None) -> str:
    """What production runs, by this store's ledger; and, after an interrupted deploy,
    whether that very call (its execution id) is on record."""
    if entries:
        last = entries[-1]
        live = (
            f"production runs release {last.release} (deployed {last.at}; "
            f"{len(entries)} deploy(s) on record)"
        )
    else:
        live = "production runs release 1.3; no deploy on record"
    if interrupted is None:
        return live
    mine = [e for e in entries if e.execution == interrupted]
    if mine:
        return (
            f"{live}; the interrupted deploy (execution {interrupted}) {RAN}: release "
            f"{mine[-1].release} at {mine[-1].at}"
        )
    return f"{live}; the interrupted deploy (execution {interrupted}) {NEVER_RAN}"


def _policy(request: ModelRequest) -> ModelResponse:
    turn = turn_messages(request)
    asked = turn[0].text if turn else ""
    results = [m for m in turn if m.role == "tool"]
    last = results[-1] if results else None
    if asked == FOLLOW_UP or "live" in asked:
        if last is None:
            return reply("Let me look at production.", call("check_deployment"))
        return reply(f"Production says: {last.text}.")
    if last is None:
        return reply("I'll run the test suite before shipping.", call("run_tests"))
    if last.tool_name == "run_tests":
        return reply(f"Tests pass. Deploying release {RELEASE}.", call("deploy", version=RELEASE))
    if last.tool_name == "deploy":
        if "may or may not have completed" in last.text and not last.text.startswith("Refused"):
            return reply(
                "The deploy was interrupted and its outcome is unknown. I will inspect "
                "production before deciding anything.",
                call("check_deployment"),
            )
        if last.text.startswith("Refused"):
            return reply(
                "I checked: the interrupted deploy never ran. Deploying deliberately.",
                call("deploy", version=RELEASE),
            )
        return reply(f"Release {RELEASE} is live in production.")
    if last.tool_name == "check_deployment":
        # After an interruption the check says whether that call ran: the words follow it.
        if NEVER_RAN in last.text:
            return reply(
                "The interrupted deploy never ran: it is not in the deployments ledger. "
                f"Deploying release {RELEASE}.",
                call("deploy", version=RELEASE),
            )
        if RAN in last.text:
            return reply(
                f"Release {RELEASE} is live in production. The interrupted deploy did "
                "complete, so I did not deploy again."
            )
        if f"release {RELEASE}" in last.text:  # a check that knows nothing of the call
            return reply(
                f"Release {RELEASE} is live in production; the check cannot tell whether the "
                "interrupted deploy itself ran, so I did not deploy again."
            )
        return reply(
            f"Release {RELEASE} is not live yet; deploying it.", call("deploy", version=RELEASE)
        )
    return reply("I am not sure what happened; please check the trace.")


def engineer(workdir: Path, model: Model | None = None, *, pace_s: float = 0.2) -> Agent:
    """The demo agent; ``model`` defaults to the in-process scripted model. ``run_tests`` and
    ``deploy`` each take ``pace_s``."""
    return Agent(
        "engineer",
        model or ScriptedModel(_policy, name="scripted/release-engineer"),
        instructions="You are a careful release engineer.",
        tools=_tools(workdir, pace_s),
    )


def agents() -> list[Agent]:
    """For workers: ``FXD_AGENTS=fxdurable.cli.demo_agent:agents``. The demo's files live in
    ``$FXD_DEMO_DIR`` (default ``.fxd-demo``, relative to the worker's directory);
    ``$FXD_DEMO_PACE_S`` is how long ``run_tests`` and ``deploy`` each take (default 0.2;
    ``fxdurable serve --demo`` sets a human pace, so a crash button lands mid-turn)."""
    workdir = Path(os.environ.get("FXD_DEMO_DIR", ".fxd-demo"))
    workdir.mkdir(parents=True, exist_ok=True)  # where the deploy tool writes its log
    pace = os.environ.get("FXD_DEMO_PACE_S")
    try:
        pace_s = 0.2 if not pace else float(pace)
    except ValueError:
        raise ConfigurationError(f"FXD_DEMO_PACE_S is seconds, not {pace!r}") from None
    return [engineer(workdir, pace_s=pace_s)]


def policy() -> Callable[[ModelRequest], ModelResponse]:
    """The scripted model's policy, for serving it over HTTP in a provider's wire format."""
    return _policy
