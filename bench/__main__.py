"""``python -m bench [--quick] [--dir DIR] [--only http]``: measure, then print one table and
its ratios."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bench.abort_latency import InterruptLatency, measure_interrupts, render_interrupts
from bench.dynamodb_steps import measure_dynamodb
from bench.headline import Headline, dynamodb_rows, pg_worker_rows, redis_rows, startup_rows
from bench.headline_measure import HeadlinePlan, measure_headline, measure_peers
from bench.http_admit import HttpFigures, measure_http_admit, render_http
from bench.http_admit import unavailable_reason as http_unavailable_reason
from bench.lambda_turns import LambdaFigures, measure_lambda_turns, render_lambda
from bench.lambda_turns import unavailable_reason as lambda_unavailable_reason
from bench.loop_lag import measure_loop_lag, render_loop_lag
from bench.parallel_tools import measure_parallel, render_parallel
from bench.pg_workers import PgPlan, PgWorkerFigures, measure_pg_workers, render_pg_workers
from bench.redis_server import RedisServer, unavailable_reason
from bench.redis_steps import measure_redis_growth, measure_redis_steps
from bench.report import RedisSection, Report
from bench.results_file import write_results
from bench.rq_throughput import measure_rq_throughput
from bench.runtime_turns import measure_turns
from bench.sqlite_steps import measure_growth, measure_resume, measure_steps
from bench.startup import measure_startup, render_startup
from bench.timing import machine_facts, machine_line
from bench.wake_latency import measure_wake_latency, render_wake_latency


@dataclass(frozen=True, slots=True)
class Plan:
    """How much to measure. Sizes of the sessions are the same in both modes (they are part
    of the claim being checked); only the number of repetitions shrinks."""

    name: str
    batches: int
    raw_ops: int  # raw commits per batch
    rounds: int  # model + tool steps per batch
    growth_events: int
    growth_batches: int
    growth_rounds: int
    resume_events: int
    resume_batches: int
    resume_reads: int
    history_reads: int
    turns: int
    concurrency: int
    # Redis store and RQ workers (measured only where redis-server is installed)
    redis_batches: int
    redis_raw_ops: int  # raw round trips (PING, SET) per batch
    redis_rounds: int
    redis_growth_batches: int
    rq_items: int  # no-op jobs or one-turn sessions per timed run
    rq_reps: int
    # HTTP admission through a served app (measured where the http extra is installed)
    http_requests: int  # timed requests of each kind
    http_batches: int
    http_warm_up: int
    # issue 10's headline: the peers, runtime growth, RSS over a long session
    headline: HeadlinePlan


QUICK = Plan(
    name="quick",
    batches=5,
    raw_ops=60,
    rounds=30,
    growth_events=5_000,
    growth_batches=8,
    growth_rounds=5,
    resume_events=10_000,
    resume_batches=5,
    resume_reads=40,
    history_reads=2,
    turns=40,
    concurrency=4,
    redis_batches=5,
    redis_raw_ops=100,
    redis_rounds=20,
    redis_growth_batches=6,
    rq_items=30,
    rq_reps=1,
    http_requests=60,
    http_batches=3,
    http_warm_up=5,
    headline=HeadlinePlan(
        reps=1, steps=100, growth_events=2_000, rss_early=30, rss_late=300, rss_reps=1
    ),
)
DEFAULT = Plan(
    name="default",
    batches=11,
    raw_ops=200,
    rounds=100,
    growth_events=5_000,
    growth_batches=30,
    growth_rounds=5,
    resume_events=10_000,
    resume_batches=11,
    resume_reads=200,
    history_reads=4,
    turns=300,
    concurrency=4,
    redis_batches=11,
    redis_raw_ops=300,
    redis_rounds=60,
    redis_growth_batches=20,
    rq_items=150,
    rq_reps=3,
    http_requests=200,
    http_batches=5,
    http_warm_up=10,
    headline=HeadlinePlan(),
)

# The tests' size (tests/bench/test_bench_smoke.py, ``--smoke``): every section and ratio line
# of a quick run, once, at sessions far too short for the figures to mean anything.
SMOKE = Plan(
    name="smoke",
    batches=2,
    raw_ops=10,
    rounds=5,
    growth_events=500,
    growth_batches=2,
    growth_rounds=2,
    resume_events=1_000,
    resume_batches=2,
    resume_reads=5,
    history_reads=1,
    turns=8,
    concurrency=2,
    redis_batches=2,
    redis_raw_ops=10,
    redis_rounds=5,
    redis_growth_batches=2,
    rq_items=6,
    rq_reps=1,
    http_requests=10,
    http_batches=1,
    http_warm_up=2,
    headline=HeadlinePlan(
        reps=1, steps=10, growth_events=200, rss_early=5, rss_late=20, rss_reps=1
    ),
)

T = TypeVar("T")

# Fresh processes each, a second or two a round: the quick run only shows the rows.
STARTUP_REPS = {SMOKE.name: 1, QUICK.name: 1, DEFAULT.name: 7}
LAMBDA_REPS = {SMOKE.name: 1, QUICK.name: 1, DEFAULT.name: 5}
# Turns of each variant (about 0.13 s parallel, 0.43 s sequential each).
PARALLEL_REPS = {SMOKE.name: 1, QUICK.name: 3, DEFAULT.name: 9}
# Rounds of the loop-lag section, each all four variants once (about 2 s a round).
LOOP_LAG_ROUNDS = {SMOKE.name: 1, QUICK.name: 3, DEFAULT.name: 5}
LOOP_LAG_STEPS = {SMOKE.name: 2, QUICK.name: 20, DEFAULT.name: 20}  # per session's turn
# Issue 27's Postgres workers row: turns per timed run, tool calls a turn, repetitions (about
# 0.15 s a turn of 10 calls on 1 worker of a loaded 2-core machine). The smoke size runs 1 and
# 2 workers: it only shows the row.
PG_WORKERS = {
    SMOKE.name: PgPlan(turns=4, calls=2, reps=1, workers=(1, 2)),
    QUICK.name: PgPlan(turns=20, calls=10, reps=3),
    DEFAULT.name: PgPlan(turns=80, calls=10, reps=3),
}
# Issue 28's abort and steer latency: samples of each kind per row (8 rows: 4 pairs, the
# interrupt from the same process and from another), and the pairs (None: all). About 0.5 s
# a sample; the smoke size runs SQLite alone (a Postgres, Redis and moto server each cost
# seconds to start; tests/runtime/test_abort_latency.py covers their push paths).
INTERRUPTS = {
    SMOKE.name: (1, ("SQLite embedded",)),
    QUICK.name: (8, None),
    DEFAULT.name: (40, None),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="fxdurable's durability overhead, as ratios to raw SQLite commits "
        "measured in the same run (and, with redis-server installed, to raw Redis round trips "
        "and RQ's own no-op job rate).",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions (well under 40 s with Redis)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the tests' run: every section once at tiny sizes (its figures mean nothing)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the databases go (default: a fresh temporary directory); put it on the "
        "disk you mean to deploy on, since commit cost is mostly that disk's fsync",
    )
    parser.add_argument(
        "--only",
        choices=[
            "http",
            "startup",
            "headline",
            "batch",
            "lambda",
            "parallel",
            "loop-lag",
            "pg-workers",
            "abort",
            "core",
        ],
        default=None,
        help="measure one section alone: 'http' is POST /chat admission latency on a served app "
        "beside GET /healthz and a raw SQLite commit of the same run; 'startup' is import, "
        "worker and demo start times; 'headline' is issue 10's table (fxdurable, DBOS and "
        "LangGraph per step, growth with session length, RSS); 'batch' is the headline's row of a "
        "parallel batch of 8 no-op safe calls per call, fxdurable beside DBOS and LangGraph on "
        "WAL+FULL; 'lambda' is a turn across many "
        "wake-function invocations against the same turn in one, on moto; 'parallel' is a "
        "turn of 4 parallel safe tool calls of 100 ms against the same turn run sequentially; "
        "'loop-lag' is the event loop's lateness under 8 concurrent sessions, the journal's "
        "crossings in a thread against on the loop; 'pg-workers' is issue 27's turns and tool "
        "steps per second on 4 (and 1) `fxdurable worker --queue postgresql://` processes "
        "sharing one database, no-op tools, each run checked exactly-once from the database; "
        "'abort' is issue 28's abort and steer latency per backend pair, from the process "
        "running the turn and from another; 'core' is the SQLite rows (raw commits, per-step "
        "cost, growth, resume, turns) and the Redis/RQ rows, or the line saying why those were "
        "skipped",
    )
    parser.add_argument(
        "--no-headline",
        action="store_true",
        help="leave out the headline section (the peers, runtime growth and RSS)",
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="write bench/results/latest.json and docs/benchmarks.md (what `make bench` does)",
    )
    return parser


def measure_redis(tmp: Path, plan: Plan, progress: Callable[[str], None]) -> RedisSection:
    """The Redis store's steps (without and with AOF), then growth and RQ throughput (without
    AOF), on redis-servers of the bench's own, stopped before this returns."""
    with RedisServer(tmp / "redis", appendonly=False) as plain:
        with RedisServer(tmp / "redis-aof", appendonly=True) as aof:
            progress(f"redis-server {plain.version} started on ports {plain.port}, {aof.port}")
            steps = measure_redis_steps(
                [plain, aof],
                batches=plan.redis_batches,
                raw_ops=plan.redis_raw_ops,
                rounds=plan.redis_rounds,
            )
        progress("Redis round trips and per-step cost measured")
        growth = measure_redis_growth(
            plain,
            events=plan.growth_events,
            batches=plan.redis_growth_batches,
            rounds=plan.growth_rounds,
            on_progress=progress,
        )
        progress("Redis cost per step against session length measured")
        rq = measure_rq_throughput(
            tmp, plain, turns=plan.rq_items, reps=plan.rq_reps, on_progress=progress
        )
        return RedisSection(version=plain.version, steps=steps, growth=growth, rq=rq)


def _optional_section(
    label: str, missing: str | None, measure: Callable[[], T], progress: Callable[[str], None]
) -> tuple[T | None, str | None, bool]:
    """A section whose extra may be missing: (figures, why there are none, whether that is
    a failure)."""
    if missing is not None:
        progress(f"{label} rows skipped: {missing}")
        return None, f"skipped: {missing}", False
    try:
        figures = measure()
    except Exception as exc:
        traceback.print_exc()
        return None, f"failed: {type(exc).__name__}: {exc}", True
    progress(f"{label} measured")
    return figures, None, False


def measure_http(
    tmp: Path, plan: Plan, progress: Callable[[str], None]
) -> tuple[HttpFigures | None, str | None, bool]:
    """The HTTP admission rows: (figures, why there are none, whether that is a failure)."""
    return _optional_section(
        "HTTP admission latency",
        http_unavailable_reason(),
        lambda: measure_http_admit(
            tmp,
            requests=plan.http_requests,
            batches=plan.http_batches,
            warm_up=plan.http_warm_up,
            on_progress=progress,
        ),
        progress,
    )


def measure_lambda(
    tmp: Path, plan: Plan, progress: Callable[[str], None]
) -> tuple[LambdaFigures | None, str | None, bool]:
    """The Lambda rows: (figures, why there are none, whether that is a failure)."""
    return _optional_section(
        "Lambda multi-invocation turn",
        lambda_unavailable_reason(),
        lambda: measure_lambda_turns(tmp, reps=LAMBDA_REPS[plan.name]),
        progress,
    )


def measure_pg(
    tmp: Path, plan: Plan, progress: Callable[[str], None]
) -> tuple[PgWorkerFigures, bool]:
    """Issue 27's Postgres workers row: (figures, whether measuring failed)."""
    pg = PG_WORKERS[plan.name]
    try:
        figures = measure_pg_workers(
            tmp,
            turns=pg.turns,
            calls=pg.calls,
            reps=pg.reps,
            on_progress=progress,
            worker_counts=pg.workers,
        )
    except Exception as exc:  # a lost or doubled turn included: the row says it failed
        traceback.print_exc()
        failed = PgWorkerFigures({}, pg.turns, pg.calls, 1, os.getloadavg(), 0)
        return dataclasses.replace(failed, note=f"failed: {type(exc).__name__}: {exc}"), True
    progress("Postgres workers' turns per second measured")
    return figures, False


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    plan = SMOKE if args.smoke else QUICK if args.quick else DEFAULT
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"  [{time.perf_counter() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fxd-bench-", dir=args.dir) as name:
        tmp = Path(name)
        progress(f"{plan.name} run in {tmp}")
        if args.only == "http":
            http, http_note, failed = measure_http(tmp, plan, progress)
            print(
                f"fxdurable bench ({plan.name} run, HTTP only, "
                f"{time.perf_counter() - started:.1f} s)\n{machine_line(tmp)}\n\n"
                + render_http(http, http_note)
            )
            return 1 if failed else 0
        if args.only == "lambda":
            lambda_figures, lambda_note, failed = measure_lambda(tmp, plan, progress)
            print(
                f"fxdurable bench ({plan.name} run, Lambda only)\n{machine_line(tmp)}\n\n"
                + render_lambda(lambda_figures, lambda_note)
            )
            return 1 if failed else 0
        if args.only == "loop-lag":
            loop_lag = measure_loop_lag(
                tmp, rounds=LOOP_LAG_ROUNDS[plan.name], steps=LOOP_LAG_STEPS[plan.name]
            )
            print(f"fxdurable bench ({plan.name} run, loop lag only)\n")
            print(render_loop_lag(loop_lag))
            return 0
        if args.only == "batch":
            steps_runs, batch = measure_peers(tmp, plan.headline, progress, steps=False)
            only = Headline(plan.name, plan.headline.ns, steps_runs, batch=batch)
            print(f"fxdurable bench ({plan.name} run, parallel batch only)\n{machine_line(tmp)}\n")
            print(only.render_batch())
            return 1 if _peer_failed(only) else 0
        if args.only == "pg-workers":
            pg, failed = measure_pg(tmp, plan, progress)
            print(
                f"fxdurable bench ({plan.name} run, Postgres workers only)\n{machine_line(tmp)}"
                f"\n\n{render_pg_workers(pg)}"
            )
            return 1 if failed else 0
        if args.only == "abort":
            interrupts = measure_abort(tmp, plan, progress)
            title = f"fxdurable bench ({plan.name} run, abort and steer latency only)"
            print(f"{title}\n{machine_line(tmp)}")
            print("\n" + render_interrupts(interrupts))
            return 1 if interrupts.failed else 0
        if args.only == "parallel":
            parallel = measure_parallel(tmp, reps=PARALLEL_REPS[plan.name])
            print(f"fxdurable bench ({plan.name} run, parallel tools only)\n")
            print(render_parallel(parallel))
            return 0
        headline: Headline | None = None
        peer_failed = False
        if args.only in (None, "headline") and not args.no_headline:
            headline = measure_headline(tmp, plan.headline, plan.name, progress)
            peer_failed = _peer_failed(headline)
        machine = machine_line(tmp)
        facts = machine_facts(tmp)
        if args.only == "headline":
            assert headline is not None
            print(f"fxdurable bench ({plan.name} run, headline only)\n{machine}\n")
            print(headline.render())
            if args.write:
                _write(headline, facts, started, {}, headline.render())
            return 1 if peer_failed else 0
        core = args.only == "core"  # the sections every other one is measured beside
        if not core:
            startup = measure_startup(tmp, reps=STARTUP_REPS[plan.name])
            progress("startup times measured")
        if args.only == "startup":
            print(f"fxdurable bench ({plan.name} run, startup only)\n\n{render_startup(startup)}")
            return 0
        steps = measure_steps(tmp, batches=plan.batches, raw_ops=plan.raw_ops, rounds=plan.rounds)
        progress("raw commits and per-step cost measured")
        growth = measure_growth(
            tmp,
            events=plan.growth_events,
            batches=plan.growth_batches,
            rounds=plan.growth_rounds,
            on_progress=progress,
        )
        progress("cost per step against session length measured")
        resume = measure_resume(
            tmp,
            events=plan.resume_events,
            batches=plan.resume_batches,
            reads=plan.resume_reads,
            history_reads=plan.history_reads,
            on_progress=progress,
        )
        progress("resume reads measured")
        turns = {
            sync: measure_turns(
                tmp, synchronous=sync, turns=plan.turns, concurrency=plan.concurrency
            )
            for sync in ("FULL", "NORMAL")
        }
        progress("end-to-end turns measured")
        redis: RedisSection | None = None
        redis_note = unavailable_reason()
        failed = peer_failed
        if redis_note is not None:
            redis_note = f"skipped: {redis_note}"
            progress(f"Redis/RQ rows {redis_note}")
        else:
            try:
                redis = measure_redis(tmp, plan, progress)
            except Exception as exc:
                traceback.print_exc()
                failed = True
                redis_note = f"failed: {type(exc).__name__}: {exc}"
        report_of = functools.partial(
            Report,
            mode=plan.name,
            machine=machine,
            steps=steps,
            growth=growth,
            resume=resume,
            turns=turns,
            redis=redis,
            redis_note=redis_note,
        )
        if core:
            core_report = report_of(elapsed_s=time.perf_counter() - started)
            print(f"fxdurable bench ({plan.name} run, core only)\n\n{core_report.render()}")
            return 1 if failed else 0
        parallel = measure_parallel(tmp, reps=PARALLEL_REPS[plan.name])
        progress("parallel tool calls measured")
        loop_lag = measure_loop_lag(
            tmp, rounds=LOOP_LAG_ROUNDS[plan.name], steps=LOOP_LAG_STEPS[plan.name]
        )
        progress("event-loop lag under concurrent sessions measured")
        http, http_note, http_failed = measure_http(tmp, plan, progress)
        dynamodb, dynamodb_failed, dynamodb_figures = measure_dynamodb(tmp, progress)
        lambda_figures, lambda_note, lambda_failed = measure_lambda(tmp, plan, progress)
        failed = failed or http_failed or dynamodb_failed or lambda_failed
        wake = measure_wake_latency(samples=20 if plan.name == "quick" else 100)
        progress("Postgres queue wake latency measured")
        pg, pg_failed = measure_pg(tmp, plan, progress)
        interrupts = measure_abort(tmp, plan, progress)
        failed = failed or pg_failed or interrupts.failed
    report = report_of(elapsed_s=time.perf_counter() - started)
    rest = "\n\n".join(
        (
            report.render(),
            render_parallel(parallel),
            render_loop_lag(loop_lag),
            render_http(http, http_note),
            dynamodb,
            render_lambda(lambda_figures, lambda_note),
            render_startup(startup),
            render_wake_latency(wake),
            render_pg_workers(pg),
        )
    )
    print(rest)
    print("\nabort and steer latency (issue 28, target p99 ≤ 500 ms)\n")
    print(render_interrupts(interrupts))
    if headline is not None:
        headline.extra += startup_rows(startup) + redis_rows(redis, redis_note)
        headline.extra += dynamodb_rows(dynamodb_figures) + pg_worker_rows(pg)
        print()
        print(headline.render())
        if args.write:
            ratios = report.ratios() | parallel.ratios()
            ratios |= redis.ratios() if redis is not None else {}
            ratios |= pg.ratios()
            _write(headline, facts, started, ratios, rest, interrupts)
    return 1 if failed else 0


def measure_abort(tmp: Path, plan: Plan, progress: Callable[[str], None]) -> InterruptLatency:
    """Issue 28's abort and steer latency rows (a pair that fails or is missing is a row
    saying so)."""
    samples, pairs = INTERRUPTS[plan.name]
    interrupts = measure_interrupts(tmp, samples=samples, pairs=pairs, on_progress=progress)
    progress("abort and steer latency measured")
    return interrupts


def _peer_failed(headline: Headline) -> bool:
    runs = [*headline.peers.values(), *headline.batch.values()]
    return any((run.note or "").startswith("failed") for run in runs)


def _write(
    headline: Headline,
    facts: dict[str, str | int],
    started: float,
    ratios: dict[str, tuple[float, str]],
    rest: str,
    interrupts: InterruptLatency | None = None,
) -> None:
    paths = write_results(
        headline,
        machine=facts,
        elapsed_s=time.perf_counter() - started,
        ratios={name: {"value": v, "note": note} for name, (v, note) in ratios.items()},
        report=rest,
        interrupts=interrupts,
    )
    print("\nwrote " + " and ".join(str(p) for p in paths))


if __name__ == "__main__":
    sys.exit(main())
