"""The agent of :mod:`bench.pg_workers`, loaded by its ``fxdurable worker`` processes
(``--agents bench.pg_noop_agent:agents``) and by the bench process that admits the turns.

Each turn is ``K`` model steps that each ask for one call of the no-op tool ``noop``, then a
final answer: ``K`` tool steps and ``K + 1`` model steps, with the offline
:class:`~fxdurable.ScriptedModel`. ``K`` is ``FXD_BENCH_PG_CALLS`` (default 10), read when the
agents are loaded, so every worker and the admitting process agree on it.

The tool does nothing but say that it ran: with ``FXD_BENCH_PG_EFFECTS`` naming a directory,
each execution appends one line (``session call execution_id``) to a file of its process's own
there, with one unbuffered ``write`` on an ``O_APPEND`` descriptor (a few microseconds, beside
the milliseconds of the step's commits). The bench reads those lines afterwards to check that
every call ran exactly once, independently of what the store recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pydantic

from fxdurable import Agent, ModelRequest, ModelResponse, ScriptedModel, ToolContext, call, reply
from fxdurable.runtime.models.scripted import turn_messages
from fxdurable.runtime.tools import define_tool

__all__ = ["AGENT", "CALLS_ENV", "DONE", "EFFECTS_ENV", "agents"]

AGENT = "pg-noop"
DONE = "done"
CALLS_ENV = "FXD_BENCH_PG_CALLS"
EFFECTS_ENV = "FXD_BENCH_PG_EFFECTS"
DEFAULT_CALLS = 10


class NoopInput(pydantic.BaseModel):
    i: int


class _Effects:
    """One append-only file per process (opened on the first call, after any fork)."""

    def __init__(self, directory: str | None) -> None:
        self._dir = directory
        self._fd: int | None = None
        self._pid = 0

    def record(self, line: str) -> None:
        if self._dir is None:
            return
        if self._fd is None or self._pid != os.getpid():
            self._pid = os.getpid()
            path = Path(self._dir) / f"effects-{self._pid}.log"
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, line.encode())


def agents(calls: int | None = None) -> list[Agent]:
    """The bench agent, ``calls`` tool calls a turn (default: ``FXD_BENCH_PG_CALLS``, else 10)."""
    if calls is None:
        calls = int(os.environ.get(CALLS_ENV, DEFAULT_CALLS))
    effects = _Effects(os.environ.get(EFFECTS_ENV) or None)

    async def execute(inp: NoopInput, ctx: ToolContext) -> str:
        effects.record(f"{ctx.session_id} {inp.i} {ctx.execution_id}\n")
        return "ok"

    def policy(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in turn_messages(request) if m.role == "assistant")
        return reply("", call("noop", i=done)) if done < calls else reply(DONE)

    tool = define_tool(
        "noop", description="Do nothing.", input_model=NoopInput, execute=execute, replay="safe"
    )
    return [Agent(AGENT, ScriptedModel(policy), tools=[tool])]
