"""fxdurable: one turn of N sequential tool steps through the embedded :class:`~fxdurable.Runtime`.

The :class:`~fxdurable.ScriptedModel` answers each model call with one call of the no-op tool
``noop`` until N have run, then with a final answer; so a turn of N steps is N + 1 model steps
and N tool steps (intent committed, tool run, result committed), plus admission, the wake, the
claim, settling and the release. A step here is a model response with one call and that
call's tool step: more than a DBOS step or a LangGraph superstep records, since the model's
response is journaled too. SQLite store (WAL) at ``synchronous=FULL`` and ``NORMAL``, and the
PostgreSQL store on the bench's server (``FXD_BENCH_POSTGRES_URL``, a database of its own; the
mode measures nothing without one); one runtime per mode, each turn in a session of its own.

The ``one response`` modes (issue 23's and 27's sequential tool step): one turn whose model's
first response asks for N calls of the no-op tool, run one after another
(``parallel_tools=False``), then a final answer. A step here is one tool step, what a DBOS
step or a LangGraph superstep records: each result commits with the next call's intent
(``tests/bench/test_step_reads.py`` counts one commit per step); the turn's two model steps,
admission, claim and settling are spread over its N calls.

The batch workload (issue 23's parallel row): one turn whose model's first response asks for N
calls of a no-op ``replay="safe"`` tool at once (``parallel_tools`` on, the default), then a
final answer; WAL+FULL only. Its figure, the turn's wall time ÷ N, includes the turn's two
model steps and its admission, claim and settling, spread over the N calls.

Run by :mod:`bench.peers` as ``python -m bench.peer_fxdurable``.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pydantic

from bench.peers import BATCH, POSTGRES, STEPS, peer_main, postgres_url, seconds_per_step
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

__all__ = [
    "BATCH_MODES",
    "DONE",
    "MODES",
    "ONE_RESPONSE",
    "ROUND_MODES",
    "batch_agent",
    "calls_agent",
    "noop_agent",
    "run_turn",
]

ONE_RESPONSE = ", one response"  # the suffix of the modes that run N calls of one response
ROUND_MODES = ("WAL+FULL", "WAL+NORMAL", POSTGRES)
MODES = (*ROUND_MODES, *(mode + ONE_RESPONSE for mode in ROUND_MODES))
BATCH_MODES = ("WAL+FULL",)
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


async def _noop(inp: NoopInput, ctx: ToolContext) -> str:
    return "ok"


def _one_response(calls: int) -> ScriptedModel:
    """A model whose first response asks for ``calls`` calls of ``noop``, then answers."""

    def policy(request: ModelRequest) -> ModelResponse:
        if any(m.role == "assistant" for m in turn_messages(request)):
            return reply(DONE)
        return reply("", *(call("noop", i=i) for i in range(calls)))

    return ScriptedModel(policy)


def batch_agent(calls: int) -> Agent:
    """An agent (``batch-<calls>``) whose turn is one response asking for ``calls`` calls of a
    no-op safe tool at once, run in parallel, then the final answer."""
    tool = define_tool(
        "noop", description="Do nothing.", input_model=NoopInput, execute=_noop, replay="safe"
    )
    return Agent(f"batch-{calls}", _one_response(calls), tools=[tool])


def calls_agent(calls: int) -> Agent:
    """An agent (``calls-<calls>``) whose turn is one response asking for ``calls`` calls of
    the no-op tool (``noop_agent``'s, the default ``safe`` policy), run one after another
    (``parallel_tools=False``), then the final answer."""
    tool = define_tool("noop", description="Do nothing.", input_model=NoopInput, execute=_noop)
    return Agent(f"calls-{calls}", _one_response(calls), tools=[tool], parallel_tools=False)


async def run_turn(rt: Runtime, session_id: str, agent: str) -> None:
    """Submit one turn and wait for it to settle, as ``session.run`` does: the runtime tells
    its own waiters when a turn it drives returns (runtime/turn_ends.py), so the wait adds
    no polling reads and no poll latency to the measured steps."""
    handle = rt.session(session_id, agent=agent)
    sub = await handle.submit("Go.")
    settled = await handle.wait(sub.id, timeout=600)
    if settled.result != DONE:
        raise RuntimeError(f"the bench turn in {session_id} ended {settled.status}")


def measure(directory: Path, mode: str, ns: Sequence[int], steps: int) -> dict[str, float]:
    if mode.endswith(ONE_RESPONSE):
        return _measure_turns(directory, mode.removesuffix(ONE_RESPONSE), ns, steps, calls_agent)
    return _measure_turns(directory, mode, ns, steps, noop_agent)


def measure_batch(directory: Path, mode: str, ns: Sequence[int], calls: int) -> dict[str, float]:
    return _measure_turns(directory, mode, ns, calls, batch_agent)


def _measure_turns(
    directory: Path, mode: str, ns: Sequence[int], steps: int, agent: Callable[[int], Agent]
) -> dict[str, float]:
    """Seconds per step at each N of turns of ``agent(N)``, on one runtime for the mode."""
    if mode == POSTGRES:
        server = postgres_url("fxd")
        if server is None:
            return {}
        url = f"{server}?schema=fxdurable"
    else:
        url = sqlite_url(directory / "fxd.db", mode.removeprefix("WAL+"))
    sessions = itertools.count()
    agents = {n: agent(n) for n in ns}
    with asyncio.Runner() as runner:
        rt = Runtime(list(agents.values()), store=url, settings=SETTINGS)
        runner.run(rt.start())
        try:

            def unit(n: int) -> None:
                runner.run(run_turn(rt, f"s{next(sessions)}", agents[n].name))

            return {str(n): seconds_per_step(unit, n, steps) for n in ns}
        finally:
            runner.run(rt.aclose())


def _import() -> object:
    import fxdurable

    return fxdurable


if __name__ == "__main__":
    workloads = {STEPS: (MODES, measure), BATCH: (BATCH_MODES, measure_batch)}
    sys.exit(peer_main("fxdurable", _import, workloads))
