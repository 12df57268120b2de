"""Turns and tool steps per second on ``fxdurable worker --queue postgresql://`` processes
sharing one database (issue 27: "turns/s with 4 workers on one database, no-op tools";
the aim is ≥ 1,000 tool steps/s aggregate), beside the same with 1 worker.

Each worker set (1 and 4 processes, ``--concurrency 1`` each unless told) runs on a database
of its own on the bench's PostgreSQL (:mod:`bench.postgres_server`): store and wake queue in
one schema of it (docs/postgres.md, "Running workers"). The workers are started before any
clock and warmed up with a few turns; then, repetition by repetition, each set runs ``turns``
one-turn sessions of :mod:`bench.pg_noop_agent` (``calls`` no-op tool calls and a final
answer: ``calls`` tool steps and ``calls + 1`` model steps per turn), the sets alternating so
a drift of the machine lands on both.

A run's clock starts before the first submission (admitted one at a time by a
:class:`~fxdurable.Runtime` in this process, which only admits and enqueues) and stops when a
count of the unsettled submissions, read from the store's table every
:data:`~bench.pg_exactly_once.POLL_S`, is zero. Then the run is checked from the database
(:func:`bench.pg_exactly_once.verify`): every submission completed with the scripted answer in
one attempt, every turn recorded its model calls and every tool call completed after one run,
every call's effect line (:mod:`bench.pg_noop_agent`) is there exactly once, and the wake queue
drained with nothing dead-lettered. A run that lost or doubled a turn raises
:class:`~bench.pg_exactly_once.ExactlyOnceError`, and the section fails.

CPU: utime + stime (``/proc/<pid>/stat``) over the timed span of the worker processes, of
the PostgreSQL server's processes (the postmaster, its children, and what the postmaster
reaped), and of this process (the admitting Runtime and the poll), each per turn: where the
machine's cores went. The server's share is unknown (None) when it is not on this host.

What bounds it (measured 2026-12-04 on the shared 2-core machine, 10 calls a turn, with
pg_stat_statements and per-thread CPU from ``/proc/<pid>/task``): CPU. A turn costs about
60-80 ms of worker CPU (four fifths of it in the thread the journal's transactions run in:
about 26 transactions and 260 statements a turn, each statement a round trip through
psycopg, and the records' encoding; the event loop's turn driver the rest), 30-37 ms of the
server's (its statements execute in about 7-8 ms of that; the rest is parsing, binding,
the protocol and the commits' WAL flushes) and 5-10 ms of the admitting process's: some
110 ms a turn, so 2 cores hold at most about 17 turns (170 tool steps) per second, whatever
the number of workers. 1,000 tool steps per second at this cost takes about 11 cores.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.pg_exactly_once import POLL_S, verify
from bench.pg_worker_set import SCHEMA, WorkerSet, cpu_s, postmaster_of, server_cpu_s
from bench.postgres_server import postgres_server

__all__ = [
    "PgPlan",
    "PgRun",
    "PgWorkerFigures",
    "measure_pg_workers",
    "render_pg_workers",
    "timed_run",
    "warm_up",
]

WORKER_COUNTS = (1, 4)
TARGET_STEPS_S = 1000.0
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class PgPlan:
    """How much :func:`measure_pg_workers` runs (``python -m bench``'s plans name one each)."""

    turns: int  # per timed run
    calls: int  # no-op tool calls per turn
    reps: int
    workers: tuple[int, ...] = WORKER_COUNTS


@dataclass(frozen=True, slots=True)
class PgRun:
    """One timed run of one worker set."""

    turns: int
    calls: int  # tool calls per turn
    seconds: float  # first submission to the last settled
    submit_seconds: float  # of which admitting (this process, one at a time)
    cpu_workers_s: float
    cpu_db_s: float | None  # None: the server is not on this host
    cpu_bench_s: float
    checked: str  # what verify() found, in words

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds

    @property
    def steps_per_s(self) -> float:
        """Tool steps per second (each beside the model step that asked for it)."""
        return self.turns * self.calls / self.seconds


def _spread(values: Sequence[float], digits: int = 1) -> str:
    mid, lo, hi = statistics.median(values), min(values), max(values)
    if len(values) == 1:
        return f"{mid:,.{digits}f}"
    return f"{mid:,.{digits}f} ({lo:,.{digits}f}–{hi:,.{digits}f})"


@dataclass(frozen=True, slots=True)
class PgWorkerFigures:
    runs: dict[int, list[PgRun]]  # workers -> one run per repetition
    turns: int
    calls: int
    concurrency: int
    load: tuple[float, float, float]  # the load average when the section started
    cpus: int
    note: str = ""  # why nothing was measured: "skipped: ..." or "failed: ..."

    def counts(self) -> list[int]:
        return sorted(self.runs)

    def turns_per_s(self, workers: int) -> list[float]:
        return [r.turns_per_s for r in self.runs[workers]]

    def steps_per_s(self, workers: int) -> list[float]:
        return [r.steps_per_s for r in self.runs[workers]]

    def scaling(self) -> list[float]:
        """Most workers' turns/s ÷ 1 worker's, repetition by repetition."""
        few, many = self.runs[min(self.runs)], self.runs[max(self.runs)]
        return [m.turns_per_s / f.turns_per_s for m, f in zip(many, few, strict=True)]

    def cpu_ms_per_turn(self, workers: int) -> tuple[float, float | None, float]:
        runs = self.runs[workers]
        db = [r.cpu_db_s for r in runs]

        def per_turn(values: Sequence[float]) -> float:
            return 1e3 * sum(values) / sum(r.turns for r in runs)

        return (
            per_turn([r.cpu_workers_s for r in runs]),
            None if None in db else per_turn([d or 0.0 for d in db]),
            per_turn([r.cpu_bench_s for r in runs]),
        )

    def ratios(self) -> dict[str, tuple[float, str]]:
        if self.note or len(self.runs) < 2:
            return {}
        many = max(self.runs)
        return {
            f"pg workers {many}/1 turns_s": (
                statistics.median(self.scaling()),
                f"{_spread(self.turns_per_s(many))} ÷ {_spread(self.turns_per_s(1))} turns/s",
            ),
            f"pg workers {many} tool_steps_s": (
                statistics.median(self.steps_per_s(many)),
                f"{self.calls} no-op tool calls per turn; target ≥ {TARGET_STEPS_S:,.0f}",
            ),
        }


# -- one run and its check --------------------------------------------------------------------


# The poll: every unsettled submission of the set's database (runs do not overlap, and the
# run's are all admitted before it starts), read through the store's partial index over
# unsettled rows, so a poll costs the same however many runs came before. (A count of the
# run's sessions by a LIKE on their ids was a scan of every submission once the server
# chose a generic plan: the costliest statement of a run in pg_stat_statements.)
_UNSETTLED = f"SELECT count(*) FROM {SCHEMA}.submissions WHERE status IN ('queued', 'running')"


def _unsettled(conn: Any) -> int:
    return int(conn.execute(_UNSETTLED).fetchone()[0])


def timed_run(group: WorkerSet, tag: str, n: int, postmaster: int | None) -> PgRun:
    import psycopg

    deadline = time.monotonic() + 120 + n * group.calls * 0.05
    with psycopg.connect(group.db_url, autocommit=True) as conn:
        workers0 = sum(cpu_s(p.pid) for p in group.procs)
        db0 = server_cpu_s(postmaster) if postmaster else 0.0
        bench0 = sum(os.times()[:2])
        start = time.perf_counter()
        group.submit(tag, n)
        submitted = time.perf_counter()
        while _unsettled(conn):
            if time.monotonic() > deadline:
                group.check_alive()
                raise RuntimeError(f"{group.workers} workers: turns {tag}-* did not settle")
            time.sleep(POLL_S)
        elapsed = time.perf_counter() - start
        bench1 = sum(os.times()[:2])
        db1 = server_cpu_s(postmaster) if postmaster else 0.0
        workers1 = sum(cpu_s(p.pid) for p in group.procs)
        checked = verify(conn, group, tag, n)
    return PgRun(
        turns=n,
        calls=group.calls,
        seconds=elapsed,
        submit_seconds=submitted - start,
        cpu_workers_s=workers1 - workers0,
        cpu_db_s=db1 - db0 if postmaster else None,
        cpu_bench_s=bench1 - bench0,
        checked=checked,
    )


# -- the measurement --------------------------------------------------------------------------


def warm_up(group: WorkerSet, postmaster: int | None) -> None:
    """Rounds of untimed (but checked) turns until every worker has run a tool call: then
    every one is connected, listening and warm. (Its "listening" line is logged at INFO,
    which a worker shows only with ``-v``, whose DEBUG logging would cost each step.)"""
    deadline = time.monotonic() + READY_TIMEOUT_S
    want = {p.pid for p in group.procs}
    rounds = 0
    while not want <= group.pids_with_effects():
        group.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Postgres bench workers did not all run:\n{group.tails()}")
        timed_run(group, f"warm{rounds}", 2 * group.workers * group.concurrency, postmaster)
        rounds += 1


def measure_pg_workers(
    tmp: Path,
    *,
    turns: int,
    calls: int,
    reps: int,
    on_progress: Callable[[str], None],
    worker_counts: Sequence[int] = WORKER_COUNTS,
    concurrency: int = 1,
) -> PgWorkerFigures:
    load = os.getloadavg()
    cpus = len(os.sched_getaffinity(0))

    def skipped(why: str) -> PgWorkerFigures:
        return PgWorkerFigures({}, turns, calls, concurrency, load, cpus, f"skipped: {why}")

    try:
        import psycopg  # noqa: F401
    except ImportError:
        return skipped("psycopg is not installed: pip install 'fxdurable[postgres]'")
    with postgres_server() as server:
        if server is None:
            return skipped("no PostgreSQL (apt-get install postgresql)")
        postmaster = postmaster_of(server)
        groups: list[WorkerSet] = []
        runs: dict[int, list[PgRun]] = {w: [] for w in worker_counts}
        try:
            for workers in worker_counts:
                group = WorkerSet(server, workers, tmp, calls=calls, concurrency=concurrency)
                groups.append(group)
                group.start()
            for group in groups:
                warm_up(group, postmaster)
            on_progress(f"Postgres worker sets {list(worker_counts)} started and warmed up")
            for rep in range(reps):
                for group in groups:
                    runs[group.workers].append(timed_run(group, f"r{rep}", turns, postmaster))
                on_progress(f"Postgres workers: repetition {rep + 1} of {reps} done")
        finally:
            for group in groups:
                group.stop()
    return PgWorkerFigures(runs, turns, calls, concurrency, load, cpus)


def render_pg_workers(figures: PgWorkerFigures) -> str:
    head = (
        "Postgres workers (issue 27): `fxdurable worker --queue postgresql://…` processes, "
        "store and queue in one database, no-op tools"
    )
    if figures.note:
        return f"{head}\n{figures.note}"
    load = " ".join(f"{x:.2f}" for x in figures.load)
    lines = [
        head,
        f"{figures.turns} turns of {figures.calls} tool calls ({figures.calls + 1} model steps) "
        f"per run, concurrency {figures.concurrency} per worker; median (min–max) of "
        f"{len(next(iter(figures.runs.values())))} reps; load average {load} at the start, "
        f"{figures.cpus} CPUs",
        "",
        f"{'workers':>7} {'turns/s':>22} {'tool steps/s':>26}  "
        "CPU ms per turn: workers  postgres  bench",
    ]
    for workers in figures.counts():
        w, db, bench = figures.cpu_ms_per_turn(workers)
        shown_db = "?" if db is None else f"{db:.1f}"
        lines.append(
            f"{workers:>7} {_spread(figures.turns_per_s(workers)):>22} "
            f"{_spread(figures.steps_per_s(workers), 0):>26}  "
            f"{w:>23.1f} {shown_db:>9} {bench:>6.1f}"
        )
    many = max(figures.runs)
    submit = max(r.submit_seconds / r.seconds for runs in figures.runs.values() for r in runs)
    lines += [
        f"scaling: {many} workers ÷ 1 worker turns/s = {_spread(figures.scaling(), 2)}",
        f"(admitting, one at a time from the bench process, took at most {submit:.0%} of a "
        f"timed run; bench CPU includes it and the poll every {POLL_S * 1e3:g} ms)",
        f"checked from the database, every run: {figures.runs[many][-1].checked}",
    ]
    for name, (value, detail) in figures.ratios().items():
        lines.append(f"ratio {name:<30} = {value:8.2f}   ({detail})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.pg_workers [--turns N --calls K --reps R --workers 1,4]``."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.pg_workers")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workers", default="1,4")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fxd-pgw-bench-") as tmp:
        figures = measure_pg_workers(
            Path(tmp),
            turns=args.turns,
            calls=args.calls,
            reps=args.reps,
            on_progress=lambda line: print(line, file=sys.stderr),
            worker_counts=[int(w) for w in args.workers.split(",")],
            concurrency=args.concurrency,
        )
    print(render_pg_workers(figures))
    return 1 if figures.note else 0


if __name__ == "__main__":
    sys.exit(main())
