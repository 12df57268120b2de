"""End to end: turns per second through the embedded :class:`~fxdurable.Runtime`.

Each turn is three model steps and two tool calls (model → tool ``lookup`` → model → tool
``lookup`` → model answers) with the offline :class:`~fxdurable.ScriptedModel`, in its own
session, so the figure is the runtime's pipeline (admission, wake, claim, steps, settle,
release) and not the growth of one conversation. All turns are submitted at once and run on
the runtime's workers; the clock stops when the last one has settled.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import pydantic

from bench.sqlite_steps import CountingStore, sqlite_url
from fxdurable import Agent, Runtime, ScriptedModel, ToolContext, WorkerSettings, call, reply
from fxdurable.core.states import SubmissionStatus
from fxdurable.runtime.tools import define_tool
from fxdurable.stores.sqlite import SqliteStore

__all__ = [
    "ANSWER",
    "PROMPT",
    "SETTINGS",
    "TurnFigures",
    "bench_agent",
    "measure_turns",
    "stepping_agent",
]

PROMPT = "What are alpha and beta?"
ANSWER = "Both values are 42."
# Timers far longer than the run: no heartbeat or scan transaction lands inside the measurement.
SETTINGS = WorkerSettings(lease_ttl_s=600.0, heartbeat_s=300.0, scan_interval_s=300.0)


class LookupInput(pydantic.BaseModel):
    key: str


async def _lookup(inp: LookupInput, ctx: ToolContext) -> str:
    return f"{inp.key} = 42"


def bench_agent() -> Agent:
    """The bench agent (``FXD_AGENTS=bench.runtime_turns:bench_agent`` for RQ workers)."""
    model = ScriptedModel(
        [
            reply("Looking up the first value.", call("lookup", key="alpha")),
            reply("Now the second one.", call("lookup", key="beta")),
            reply(ANSWER),
        ],
        chunk_size=64,
    )
    lookup = define_tool(
        "lookup", description="Look a key up.", input_model=LookupInput, execute=_lookup
    )
    return Agent("bench", model, instructions="Answer briefly.", tools=[lookup])


@dataclass(frozen=True, slots=True)
class TurnFigures:
    turns: int
    seconds: float  # wall time for all turns
    transactions_per_turn: float
    concurrency: int

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds


async def _run(url: str, turns: int, concurrency: int) -> TurnFigures:
    store = CountingStore(SqliteStore(url))
    try:
        async with Runtime(
            [bench_agent()], store=store, settings=SETTINGS, concurrency=concurrency
        ) as rt:
            if await rt.session("warm-up").run("Warm up.", timeout=60) != ANSWER:
                raise RuntimeError("the bench agent did not complete its warm-up turn")
            tx0 = store.transactions
            start = time.perf_counter()
            handles = [rt.session(f"turn-{n}") for n in range(turns)]
            subs = [await h.submit(PROMPT) for h in handles]
            for handle, sub in zip(handles, subs, strict=True):
                settled = await handle.wait(sub.id, timeout=120)
                if settled.status != SubmissionStatus.COMPLETED:
                    raise RuntimeError(f"bench turn {sub.id} ended {settled.status}")
            elapsed = time.perf_counter() - start
            transactions = store.transactions - tx0
    finally:
        store.close()
    return TurnFigures(
        turns=turns,
        seconds=elapsed,
        transactions_per_turn=transactions / turns,
        concurrency=concurrency,
    )


def measure_turns(tmp: Path, *, synchronous: str, turns: int, concurrency: int) -> TurnFigures:
    path = tmp / f"turns-{synchronous.lower()}.db"
    return asyncio.run(_run(sqlite_url(path, synchronous), turns, concurrency))


def stepping_agent(tool_steps: int) -> Agent:
    """An agent whose turn is ``tool_steps`` tool steps (a ``lookup`` each), then ANSWER."""
    steps = [reply(f"Step {n}.", call("lookup", key=f"k{n}")) for n in range(tool_steps)]
    model = ScriptedModel([*steps, reply(ANSWER)], chunk_size=64)
    lookup = define_tool(
        "lookup", description="Look a key up.", input_model=LookupInput, execute=_lookup
    )
    return Agent("bench", model, instructions="Answer briefly.", tools=[lookup])
