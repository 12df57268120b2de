"""``python -m bench [--quick] [--dir DIR]``: measure, then print one table and its ratios."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.report import Report
from bench.runtime_turns import measure_turns
from bench.sqlite_steps import measure_growth, measure_resume, measure_steps
from bench.timing import machine_line


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
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="fxdurable's durability overhead, as ratios to raw SQLite commits "
        "measured in the same run.",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (well under 20 s)")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the databases go (default: a fresh temporary directory); put it on the "
        "disk you mean to deploy on, since commit cost is mostly that disk's fsync",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    plan = QUICK if args.quick else DEFAULT
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"  [{time.perf_counter() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fxd-bench-", dir=args.dir) as name:
        tmp = Path(name)
        progress(f"{plan.name} run in {tmp}")
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
        machine = machine_line(tmp)
    report = Report(
        mode=plan.name,
        machine=machine,
        steps=steps,
        growth=growth,
        resume=resume,
        turns=turns,
        elapsed_s=time.perf_counter() - started,
    )
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
