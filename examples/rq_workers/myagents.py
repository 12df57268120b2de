"""Your agents module: what ``FXD_AGENTS=myagents:agents`` names for the workers.

``fetch_metrics`` is a read (``replay="safe"``). ``publish_report`` is ``replay="idempotent"``:
after a crash it runs again with the same ``ctx.execution_id``, which it passes on as the
publishing system's idempotency key. Here the "system" is the ``outbox/`` directory, one
file per key, so publishing twice under one key leaves one report.
"""

from __future__ import annotations

import os
from pathlib import Path

import pydantic

import fxdurable as fx

OUTBOX = Path("outbox")  # relative to the worker's directory: the project's
METRICS = {"signups": 120, "churned": 3, "tickets_closed": 41}


class NoInput(pydantic.BaseModel):
    pass


class Report(pydantic.BaseModel):
    title: str = pydantic.Field(description="the report's title")
    body: str = pydantic.Field(description="the report, in a few lines of plain text")


@fx.tool(reuse=False)
def fetch_metrics(_: NoInput, ctx: fx.ToolContext) -> str:
    """This week's product metrics."""
    return ", ".join(f"{name}={value}" for name, value in METRICS.items())


@fx.tool(replay="idempotent")
def publish_report(inp: Report, ctx: fx.ToolContext) -> str:
    """Publish a report to the team. Safe to retry with the same idempotency key."""
    OUTBOX.mkdir(exist_ok=True)
    # The key is the same on every run of this call, in any worker: a second run replaces
    # the first one's file instead of publishing a second report.
    (OUTBOX / f"{ctx.execution_id}.txt").write_text(f"{inp.title}\n\n{inp.body}\n")
    return f"published {inp.title!r} (key {ctx.execution_id})"


reporter = fx.Agent(
    "reporter",
    model=os.environ.get("AGENT_MODEL", "openai/gpt-4o-mini"),
    instructions=(
        "You write the weekly report: fetch the metrics, then publish one short report with "
        "publish_report. Answer with one sentence saying what you published."
    ),
    tools=[fetch_metrics, publish_report],
)

agents = [reporter]
