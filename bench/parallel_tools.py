"""A turn whose model asks for 4 safe calls of 100 ms each in one response, run end to end
through the embedded :class:`~fxdurable.Runtime` (SQLite, scripted model): with
``parallel_tools=True`` (the default) against the same agent with ``parallel_tools=False``.

The calls run concurrently, each with its own intent and result commit (serialised per turn),
so the parallel turn should take about one call's time plus the commits: the ratio
parallel / sequential is expected near 0.25–0.35, not 1. Half the calls are async
(``asyncio.sleep``) and half sync (``time.sleep`` in a thread), as real tools mix them.
Each variant runs ``reps`` turns (each in a session of its own) after one untimed warm-up
turn; the median is reported.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import pydantic

from bench.runtime_turns import SETTINGS
from bench.sqlite_steps import sqlite_url
from fxdurable import Agent, Runtime, ScriptedModel, ToolContext, call, define_tool, reply
from fxdurable.core.states import SubmissionStatus
from fxdurable.stores.sqlite import SqliteStore

__all__ = ["PARALLEL_RATIO_NAMES", "ParallelFigures", "measure_parallel", "render_parallel"]

CALLS = 4
CALL_S = 0.1
PARALLEL_RATIO_NAMES = ("parallel tools/sequential (4 × 100 ms safe calls)",)


class Part(pydantic.BaseModel):
    name: str


async def _async_probe(inp: Part, ctx: ToolContext) -> str:
    await asyncio.sleep(CALL_S)
    return f"{inp.name} ok"


def _sync_probe(inp: Part, ctx: ToolContext) -> str:
    time.sleep(CALL_S)
    return f"{inp.name} ok"


def _agent(parallel: bool) -> Agent:
    calls = [call("async_probe" if i % 2 else "sync_probe", name=f"p{i}") for i in range(CALLS)]
    model = ScriptedModel([reply("Probing.", *calls), reply("All parts ok.")], chunk_size=64)
    tools = [
        define_tool("async_probe", description="Probe.", input_model=Part, execute=_async_probe),
        define_tool("sync_probe", description="Probe.", input_model=Part, execute=_sync_probe),
    ]
    return Agent("bench-parallel", model, tools=tools, parallel_tools=parallel)


@dataclass(frozen=True, slots=True)
class ParallelFigures:
    """Seconds per turn, each sample a whole turn (admission to settled)."""

    parallel: list[float]
    sequential: list[float]

    def ratios(self) -> dict[str, tuple[float, str]]:
        p, s = statistics.median(self.parallel), statistics.median(self.sequential)
        note = f"median turn {p * 1000:.0f} ms vs {s * 1000:.0f} ms; one call is {CALL_S:g} s"
        return {PARALLEL_RATIO_NAMES[0]: (p / s, note)}


async def _turns(tmp: Path, reps: int) -> ParallelFigures:
    samples: dict[bool, list[float]] = {True: [], False: []}
    for parallel in (True, False):
        store = SqliteStore(sqlite_url(tmp / f"parallel-{parallel}.db", "NORMAL"))
        try:
            async with Runtime([_agent(parallel)], store=store, settings=SETTINGS) as rt:
                for rep in range(reps + 1):  # the first turn warms up, untimed
                    session = rt.session(f"s{rep}")
                    started = time.perf_counter()
                    sub = await session.submit("probe every part")
                    done = await session.wait(sub.id, timeout=30)
                    elapsed = time.perf_counter() - started
                    assert done.status == SubmissionStatus.COMPLETED, done
                    if rep:
                        samples[parallel].append(elapsed)
        finally:
            store.close()
    return ParallelFigures(parallel=samples[True], sequential=samples[False])


def measure_parallel(tmp: Path, *, reps: int) -> ParallelFigures:
    return asyncio.run(_turns(tmp, reps))


def render_parallel(figures: ParallelFigures) -> str:
    """The section: one row per variant and its ``ratio`` line."""
    parallel_ms = statistics.median(figures.parallel) * 1000
    sequential_ms = statistics.median(figures.sequential) * 1000
    lines = [
        f"Parallel tool calls (embedded runtime, SQLite NORMAL; one response asking for {CALLS} "
        f"safe calls of {CALL_S * 1000:.0f} ms, half async, half sync), median of "
        f"{len(figures.parallel)} turns",
        "",
        f"{'case':<40} {'turn ms':>10}",
        f"{'parallel_tools=True (default)':<40} {parallel_ms:>10.0f}",
        f"{'parallel_tools=False':<40} {sequential_ms:>10.0f}",
    ]
    for name, (value, note) in figures.ratios().items():
        lines.append(f"ratio {name} = {value:8.2f}   ({note})")
    return "\n".join(lines)
