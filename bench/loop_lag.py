"""Event-loop lag under 8 concurrent sessions, with the journal's crossings in a thread (as
shipped: :func:`fxdurable.runtime.crossing.durable`) and run on the loop (the alternative
issue 23 names: no crossing, but the loop waits for each commit's fsync).

Eight sessions each run one turn of ``STEPS`` (20) sequential no-op tool steps in one embedded
:class:`~fxdurable.Runtime` (SQLite WAL, ``synchronous=FULL`` and ``NORMAL``) while a ticker
on the same loop sleeps 1 ms at a time and records how late each wake-up is: what a heartbeat
or another session's timer would wait behind the commits. The row also gives the cost of a
step (wall time of the 8 turns ÷ their steps), so the two choices are compared on both.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peer_fxdurable import noop_agent, run_turn
from bench.runtime_turns import SETTINGS
from bench.sqlite_steps import sqlite_url
from fxdurable import Runtime
from fxdurable.runtime import crossing

__all__ = ["LagFigures", "measure_loop_lag", "render_loop_lag"]

SESSIONS = 8
STEPS = 20
TICK_S = 0.001
CROSSINGS = ("thread", "on loop")
MODES = ("FULL", "NORMAL")


@dataclass(frozen=True, slots=True)
class LagFigures:
    """Per (crossing, mode): ms per step of the concurrent turns, and the ticker's lateness
    in ms (each sample one 1 ms sleep's wake-up past its deadline)."""

    step_ms: dict[tuple[str, str], list[float]]
    lag_ms: dict[tuple[str, str], list[float]]


async def _inline(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


@contextmanager
def _crossing(kind: str) -> Iterator[None]:
    """``on loop``: every module that imported ``durable`` runs its calls inline instead."""
    if kind == "thread":
        yield
        return
    # Kept before patching: crossing itself is among the modules patched, so reading
    # crossing.durable afterwards would "restore" every module to _inline for good (it did:
    # a later test of the same process then ran its journal calls on the loop and hung).
    shipped = crossing.durable
    patched = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("fxdurable.") and getattr(module, "durable", None) is shipped
    ]
    for module in patched:
        module.durable = _inline  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.durable = shipped  # type: ignore[attr-defined]


async def _ticker(stop: asyncio.Event, lateness: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + TICK_S
        await asyncio.sleep(TICK_S)
        lateness.append(max(0.0, loop.time() - due) * 1000)


async def _round(path: Path, mode: str, steps: int) -> tuple[float, list[float]]:
    """One timed round of the 8 concurrent turns: ms per step, and the ticker's lateness."""
    agent = f"noop-{steps}"
    async with Runtime(
        [noop_agent(steps)], store=sqlite_url(path, mode), settings=SETTINGS, concurrency=SESSIONS
    ) as rt:
        await run_turn(rt, "warm", agent)
        stop = asyncio.Event()
        lateness: list[float] = []
        ticker = asyncio.ensure_future(_ticker(stop, lateness))
        started = time.perf_counter()
        await asyncio.gather(*(run_turn(rt, f"s{i}", agent) for i in range(SESSIONS)))
        step_ms = (time.perf_counter() - started) / (SESSIONS * steps) * 1000
        stop.set()
        await ticker
    return step_ms, lateness


def measure_loop_lag(tmp: Path, *, rounds: int, steps: int = STEPS) -> LagFigures:
    """Each (crossing, mode) in turn, interleaved ``rounds`` times, each on a fresh file;
    each session's turn is ``steps`` tool steps."""
    step_ms: dict[tuple[str, str], list[float]] = {}
    lag_ms: dict[tuple[str, str], list[float]] = {}
    for rep in range(rounds):
        for kind in CROSSINGS:
            for mode in MODES:
                with _crossing(kind):
                    path = tmp / f"lag-{kind.replace(' ', '-')}-{mode}-{rep}.db"
                    ms, lags = asyncio.run(_round(path, mode, steps))
                step_ms.setdefault((kind, mode), []).append(ms)
                lag_ms.setdefault((kind, mode), []).extend(lags)
    return LagFigures(step_ms=step_ms, lag_ms=lag_ms)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def render_loop_lag(figures: LagFigures) -> str:
    lines = [
        f"Event-loop lag, {SESSIONS} concurrent sessions of sequential no-op tool steps "
        "(embedded runtime, SQLite WAL; a 1 ms ticker on the same loop), journal crossings "
        "in a thread vs on the loop",
        "",
        f"{'crossing':<9} {'sync':<7} {'ms/step (median, range)':>26} "
        f"{'lag p50':>8} {'p99':>7} {'max ms':>7}",
    ]
    for (kind, mode), steps in figures.step_ms.items():
        lags = figures.lag_ms[(kind, mode)]
        spread = f"{statistics.median(steps):.3f} ({min(steps):.3f}-{max(steps):.3f})"
        lines.append(
            f"{kind:<9} {mode:<7} {spread:>26} {_quantile(lags, 0.5):>8.2f} "
            f"{_quantile(lags, 0.99):>7.2f} {max(lags, default=float('nan')):>7.2f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp_dir:
        print(
            render_loop_lag(
                measure_loop_lag(Path(tmp_dir), rounds=int(sys.argv[1:2][0]) if sys.argv[1:] else 3)
            )
        )
