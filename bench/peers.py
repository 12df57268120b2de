"""The same workload on fxdurable and its peers: N sequential no-op steps in one durable unit.

Each system runs in a subprocess of its own (``python -m bench.peer_<name>``), one per
repetition, so the peers' global state (DBOS is a process-wide singleton that configures
logging; LangGraph imports a large stack) never touches the bench process or each other, and a
peer that is not installed is a line in the table instead of an ImportError. A subprocess
measures every mode of its system at every N and prints one JSON object on its last line.

The figure is seconds per step: the wall time of whole durable units (a DBOS workflow, a
LangGraph ``invoke``, an fxdurable turn) divided by the steps they ran, after one untimed
warm-up unit per mode. Units of ``N`` steps are repeated until about ``steps`` steps have run,
so N = 10 and N = 100 are timed over the same number of steps.

A second workload (``--workload batch``, issue 23): one durable unit of N no-op steps run
concurrently (an fxdurable turn whose model asks for N safe calls at once, a DBOS workflow
gathering N async steps, a LangGraph superstep of N parallel nodes), in each system's WAL+FULL
mode only; the figure is again the unit's wall time ÷ N, so seconds per call.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "BATCH",
    "NOT_INSTALLED_EXIT",
    "PEERS",
    "POSTGRES",
    "STEPS",
    "PeerRun",
    "Workload",
    "package_version",
    "peer_main",
    "postgres_url",
    "run_peer",
    "seconds_per_step",
]

NOT_INSTALLED_EXIT = 3  # a peer module's exit code when its package cannot be imported
# system name -> (module, the distribution whose version is reported)
PEERS = {
    "fxdurable": ("bench.peer_fxdurable", "fxdurable"),
    "DBOS": ("bench.peer_dbos", "dbos"),
    "LangGraph": ("bench.peer_langgraph", "langgraph"),
}
# The mode of the systems that run on PostgreSQL: the bench's server (bench/postgres_server.py),
# passed to each peer's subprocess as FXD_BENCH_POSTGRES_URL.
POSTGRES = "Postgres"
# Measure one mode at all of ``ns`` into {str(n): seconds per step}.
Measure = Callable[[Path, str, Sequence[int], int], dict[str, float]]
# A workload of a peer module: the modes it measures, and how it measures one of them.
Workload = tuple[Sequence[str], Measure]
STEPS = "steps"  # N sequential steps per unit
BATCH = "batch"  # N concurrent steps per unit


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def postgres_url(prefix: str) -> str | None:
    """A fresh database on the bench's PostgreSQL server, or None when the run has none."""
    from bench.postgres_server import ENV, fresh_database

    server = os.environ.get(ENV)
    return None if not server else fresh_database(server, prefix)


def seconds_per_step(run_unit: Callable[[int], object], n: int, steps: int) -> float:
    """Run one untimed unit of ``n`` steps, then ``max(1, steps // n)`` timed ones; return the
    wall time per step of the timed units."""
    run_unit(n)
    units = max(1, steps // n)
    start = time.perf_counter()
    for _ in range(units):
        run_unit(n)
    return (time.perf_counter() - start) / (units * n)


def peer_main(
    dist: str, import_check: Callable[[], object], workloads: Mapping[str, Workload]
) -> int:
    """The ``python -m bench.peer_<name>`` entry point shared by every system: parse the
    arguments, check the package imports (exit ``NOT_INSTALLED_EXIT`` if not), measure each
    mode of the chosen workload (``STEPS`` or ``BATCH``), print
    ``{"version": ..., "figures": {mode: {n: s}}}`` as the last line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--ns", default="10,100")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workload", choices=sorted(workloads), default=STEPS)
    args = parser.parse_args()
    modes, measure = workloads[args.workload]
    try:
        import_check()
    except ImportError as exc:
        print(f"not installed ({exc})")
        return NOT_INSTALLED_EXIT
    ns = [int(n) for n in args.ns.split(",")]
    figures = {}
    for index, mode in enumerate(modes):
        directory = args.dir / f"mode-{index}"
        directory.mkdir(parents=True, exist_ok=True)
        figures[mode] = measure(directory, mode, ns, args.steps)
    print(json.dumps({"version": package_version(dist), "figures": figures}))
    return 0


@dataclass(slots=True)
class PeerRun:
    """One system's repetitions: per mode and N, one seconds-per-step sample per repetition;
    or why there are none (``note``)."""

    system: str
    version: str | None = None
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    reps: int = 0  # subprocesses started
    note: str | None = None  # "not installed (...)" or "failed: ..."

    def add(self, figures: dict[str, dict[str, float]]) -> None:
        for mode, by_n in figures.items():
            for n, seconds in by_n.items():
                self.samples.setdefault(mode, {}).setdefault(n, []).append(seconds)


def run_peer(
    run: PeerRun,
    tmp: Path,
    *,
    ns: Sequence[int],
    steps: int,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    workload: str = STEPS,
) -> None:
    """One repetition of ``run.system``'s ``workload`` in a subprocess; adds its figures to
    ``run`` or sets ``run.note``. Later repetitions of a system that is not installed are
    skipped."""
    if run.note is not None:
        return
    module, _dist = PEERS[run.system]
    directory = tmp / f"{module.rsplit('.', 1)[1]}-{workload}-{run.reps}"
    run.reps += 1
    directory.mkdir(parents=True)
    command = [python, "-m", module, "--dir", str(directory)]
    command += ["--ns", ",".join(map(str, ns)), "--steps", str(steps), "--workload", workload]
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=600,
            env=None if env is None else dict(env),
        )
    except subprocess.TimeoutExpired:
        run.note = "failed: did not finish within 600 s"
        return
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    if proc.returncode == NOT_INSTALLED_EXIT:
        run.note = last[0]
        return
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        run.note = f"failed: exit {proc.returncode}: {tail}"
        return
    result = json.loads(last[0])
    run.version = result["version"]
    run.add(result["figures"])
