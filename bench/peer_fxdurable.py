"""fxdurable: one turn of N sequential tool steps through the embedded :class:`~fxdurable.Runtime`.

The :class:`~fxdurable.ScriptedModel` answers each model call with one call of the no-op tool
``noop`` until N have run, then with a final answer; so a turn of N steps is N + 1 model steps
and N tool steps (intent committed, tool run, result committed), plus admission, the wake, the
claim, settling and the release. A step here is a model response with one call and that
call's tool step: more than a DBOS step or a LangGraph superstep records, since the model's
response is journaled too. SQLite store (WAL) at ``synchronous=FULL`` and ``NORMAL``, and the
PostgreSQL store on the bench's server (``FXD_BENCH_POSTGRES_URL``, a database of its own; the
mode measures nothing without one); one runtime per mode, each turn in a session of its own.

Run by :mod:`bench.peers` as ``python -m bench.peer_fxdurable``.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pydantic

from bench.peers import POSTGRES, peer_main, postgres_url, seconds_per_step
from bench.runtime_turns import SETTINGS
from bench.sqlite_steps import sqlite_url
from fxdurable import (
    Agent,
    ModelRequest,
    ModelResponse,
    Runtime,
    ScriptedModel,
    ToolContext,
    call,
    reply,
)
from fxdurable.runtime.models.scripted import turn_messages
from fxdurable.runtime.tools import define_tool

__all__ = ["DONE", "MODES", "noop_agent", "run_turn"]

MODES = ("WAL+FULL", "WAL+NORMAL", POSTGRES)
DONE = "done"


class NoopInput(pydantic.BaseModel):
    i: int


def noop_agent(steps: int, *, name: str | None = None, stamps: list[float] | None = None) -> Agent:
    """An agent whose every turn calls ``noop`` ``steps`` times, one call per model response
    (named ``noop-<steps>`` unless ``name`` is given). With ``stamps``, each run of the tool
    appends ``time.perf_counter()`` to it."""

    async def execute(inp: NoopInput, ctx: ToolContext) -> str:
        if stamps is not None:
            stamps.append(time.perf_counter())
        return "ok"

    def policy(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in turn_messages(request) if m.role == "assistant")
        return reply("", call("noop", i=done)) if done < steps else reply(DONE)

    tool = define_tool("noop", description="Do nothing.", input_model=NoopInput, execute=execute)
    return Agent(name or f"noop-{steps}", ScriptedModel(policy), tools=[tool])


async def run_turn(rt: Runtime, session_id: str, agent: str) -> None:
    """Submit one turn and wait for it to settle. The waiter polls every 2 ms (``run`` polls
    every 20 ms, which would add up to 2 ms a step at N = 10), as bench.runtime_turns does."""
    handle = rt.session(session_id, agent=agent)
    sub = await handle.submit("Go.")
    settled = await handle.wait(sub.id, timeout=600, poll_s=0.002)
    if settled.result != DONE:
        raise RuntimeError(f"the bench turn in {session_id} ended {settled.status}")


def measure(directory: Path, mode: str, ns: Sequence[int], steps: int) -> dict[str, float]:
    if mode == POSTGRES:
        server = postgres_url("fxd")
        if server is None:
            return {}
        url = f"{server}?schema=fxdurable"
    else:
        url = sqlite_url(directory / "fxd.db", mode.removeprefix("WAL+"))
    sessions = itertools.count()
    with asyncio.Runner() as runner:
        rt = Runtime([noop_agent(n) for n in ns], store=url, settings=SETTINGS)
        runner.run(rt.start())
        try:

            def unit(n: int) -> None:
                runner.run(run_turn(rt, f"s{next(sessions)}", f"noop-{n}"))

            return {str(n): seconds_per_step(unit, n, steps) for n in ns}
        finally:
            runner.run(rt.aclose())


def _import() -> object:
    import fxdurable

    return fxdurable


if __name__ == "__main__":
    sys.exit(peer_main("fxdurable", _import, MODES, measure))
