"""A runtime step late in a long session against one early in a short session, per store.

Through the real :class:`~fxdurable.Runtime`: each repetition runs one turn of ``rounds``
rounds (a model response calling the no-op tool, then that tool's step) in a fresh session of
a few events, and one in a session of ~``events`` events, on the same store. The time of a
round is the interval between two consecutive runs of the tool: the tool's result committed,
the next model step (its request read and built, its response journaled) and the next call's
intent committed. Its median over the turn is the figure; the ratio long ÷ short is the
claim (issue 10: ≤ 1.2 on every store).

The long session is built through the journal (:class:`bench.sqlite_steps.SessionDriver`:
turns of eight tool rounds, then settled and released), which is much faster than through the
runtime and leaves the same records.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.peer_fxdurable import noop_agent, run_turn
from bench.redis_server import RedisServer, unavailable_reason
from bench.runtime_turns import SETTINGS
from bench.sqlite_steps import MODEL_TEXT, CountingStore, SessionDriver, open_journal, sqlite_url
from fxdurable import Runtime
from fxdurable.core.journal import Journal
from fxdurable.core.store import ReadView

__all__ = ["AGENT", "GrowthRuns", "measure_runtime_growth"]

AGENT = "bench"  # SessionDriver admits its turns for this agent


@dataclass(frozen=True, slots=True)
class GrowthRuns:
    """One store's rounds: seconds per round (median within a turn), one per repetition."""

    store: str
    short_events: int  # events in a short session after its measured turn
    long_events: int
    short_s: list[float]
    long_s: list[float]

    @property
    def ratios(self) -> list[float]:
        return [lo / sh for lo, sh in zip(self.long_s, self.short_s, strict=True)]


def build_long_session(journal: Journal, session_id: str, events: int) -> int:
    """A session of at least ``events`` events, at rest (its last turn settled, lease
    released); returns its length."""
    driver = SessionDriver(journal, session_id)
    driver.grow(events)
    driver.model_step(tools=0)
    journal.settle(driver.fence, driver.submission_id, "completed", text=MODEL_TEXT)
    journal.release(driver.fence)
    return driver.events()


def _events(journal: Journal, session_id: str) -> int:
    def count(view: ReadView) -> int:
        session = view.get_session(session_id)
        return 0 if session is None else session.next_event_seq - 1

    return journal.read(count)


async def _sample(
    url: str, long_id: str, *, reps: int, rounds: int
) -> tuple[list[float], list[float], int, int]:
    stamps: list[float] = []
    rt = Runtime([noop_agent(rounds, name=AGENT, stamps=stamps)], store=url, settings=SETTINGS)
    short_s: list[float] = []
    long_s: list[float] = []
    async with rt:
        for rep in range(reps + 1):  # repetition 0 warms up
            for session_id, out in ((f"short-{rep}", short_s), (long_id, long_s)):
                stamps.clear()
                await run_turn(rt, session_id, AGENT)
                if len(stamps) != rounds:
                    raise RuntimeError(f"the growth turn in {session_id} ran {len(stamps)} tools")
                if rep:
                    out.append(statistics.median(b - a for a, b in itertools.pairwise(stamps)))
        short_events = _events(rt.journal, f"short-{reps}")
        long_events = _events(rt.journal, long_id)
    return short_s, long_s, short_events, long_events


def _measure(
    store: str, url: str, build_url: str, *, events: int, reps: int, rounds: int
) -> GrowthRuns:
    journal, built = (
        open_journal(build_url) if build_url.startswith("sqlite") else _redis(build_url)
    )
    try:
        build_long_session(journal, "long", events)
    finally:
        built.close()
    short_s, long_s, short_events, long_events = asyncio.run(
        _sample(url, "long", reps=reps, rounds=rounds)
    )
    return GrowthRuns(store, short_events, long_events, short_s, long_s)


def _redis(url: str) -> tuple[Journal, CountingStore]:
    from bench.redis_steps import open_redis_journal

    return open_redis_journal(url)


def measure_runtime_growth(
    tmp: Path,
    *,
    events: int,
    reps: int,
    rounds: int,
    redis: bool = True,
    on_progress: Callable[[str], None],
) -> tuple[list[GrowthRuns], str | None]:
    """SQLite (FULL; the long session built at NORMAL) and, where redis-server is installed,
    Redis (no AOF). Returns the runs and, when Redis was skipped, why."""
    path = tmp / "runtime-growth.db"
    runs = [
        _measure(
            "SQLite FULL",
            sqlite_url(path),
            sqlite_url(path, "NORMAL"),
            events=events,
            reps=reps,
            rounds=rounds,
        )
    ]
    on_progress("runtime step against session length measured on SQLite")
    note = unavailable_reason() if redis else "not asked for"
    if note is not None:
        return runs, f"skipped: {note}"
    with RedisServer(tmp / "redis-growth", appendonly=False) as server:
        url = server.store_url(1, "bench-runtime-growth")
        runs.append(_measure("Redis", url, url, events=events, reps=reps, rounds=rounds))
    on_progress("runtime step against session length measured on Redis")
    return runs, None
