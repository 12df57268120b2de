"""Measure the headline section: the peers' steps and parallel batches (repetitions
interleaved), runtime growth with session length, RSS over a long session.
:mod:`bench.headline` turns it into the table."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.headline import SYSTEMS, Headline
from bench.peers import BATCH, PeerRun, run_peer
from bench.postgres_server import ENV, postgres_server
from bench.rss_turns import measure_rss
from bench.runtime_growth import measure_runtime_growth

__all__ = ["HeadlinePlan", "measure_headline", "measure_peers"]


@dataclass(frozen=True, slots=True)
class HeadlinePlan:
    """How much the headline measures; the defaults are the sizes issue 10 states."""

    reps: int = 3  # repetitions of the step comparison and of the growth turns
    ns: tuple[int, ...] = (10, 100)  # steps per durable unit
    steps: int = 150  # steps timed per (system, mode, N) and repetition
    batch: int = 8  # calls per parallel batch (issue 23's row)
    batch_calls: int = 160  # calls timed per system and repetition (20 batches of 8)
    growth_events: int = 10_000  # length of the long session
    growth_rounds: int = 5  # rounds per measured turn
    rss_early: int = 100
    rss_late: int = 1_000
    # RSS is a size, not a timing: load on the machine does not move it (three runs on a
    # loaded machine agreed to 0.1 MiB), and a run of 1,000 turns costs ~40 s of the bench's
    # 10 minutes, so one run by default.
    rss_reps: int = 1
    redis: bool = True  # measure runtime growth on Redis too (where redis-server is installed)


def measure_peers(
    tmp: Path, plan: HeadlinePlan, progress: Callable[[str], None], *, steps: bool = True
) -> tuple[dict[str, PeerRun], dict[str, PeerRun]]:
    """Every system's sequential steps (unless ``steps`` is False: ``--only batch``) and
    parallel batch, each repetition running each system once per workload, in a process of
    its own: (steps, batch)."""
    peers = {system: PeerRun(system) for system in SYSTEMS}
    batch = {system: PeerRun(system) for system in SYSTEMS}
    # One PostgreSQL server for the run's Postgres mode (each measurement a database of its
    # own); without one that mode's cells say "not measured". The batch is SQLite only.
    with postgres_server() if steps else contextlib.nullcontext(None) as pg:
        env = None if pg is None else {**os.environ, ENV: pg}
        if pg is None and steps:
            progress("no PostgreSQL server: the Postgres step rows are not measured")
        for rep in range(plan.reps):
            for run in peers.values() if steps else ():
                run_peer(run, tmp / "peers", ns=plan.ns, steps=plan.steps, env=env)
            for run in batch.values():
                run_peer(
                    run, tmp / "peers", ns=(plan.batch,), steps=plan.batch_calls, workload=BATCH
                )
            progress(f"peers: repetition {rep + 1} of {plan.reps} done")
    for run in [*peers.values(), *batch.values()] if steps else batch.values():
        if run.note is not None:
            progress(f"{run.system}: {run.note}")
    return peers, batch


def measure_headline(
    tmp: Path, plan: HeadlinePlan, mode: str, progress: Callable[[str], None]
) -> Headline:
    peers, batch = measure_peers(tmp, plan, progress)
    growth, note = measure_runtime_growth(
        tmp,
        events=plan.growth_events,
        reps=plan.reps,
        rounds=plan.growth_rounds,
        redis=plan.redis,
        on_progress=progress,
    )
    rss = []
    for rep in range(plan.rss_reps):
        rss.append(measure_rss(tmp / f"rss-{rep}", early=plan.rss_early, late=plan.rss_late))
    progress(f"RSS over {plan.rss_late:,} turns of one session measured")
    return Headline(
        mode=mode,
        ns=plan.ns,
        peers=peers,
        growth=growth,
        growth_note=note,
        rss=rss,
        batch=batch,
        batch_width=plan.batch,
    )
