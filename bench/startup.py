"""Startup as a user sees it, each figure the wall time of a fresh ``python`` process:

- ``import fxdurable`` (and, beside it, importing the names a program starts with);
- worker ready: from spawning ``fxdurable worker`` (SQLite store, RQ queue, the demo agent)
  until it has registered with Redis, i.e. until it can take a wake (needs ``redis-server``);
- demo first step: from spawning ``fxdurable demo`` until its first model step is printed;
- recovery: the wall of the ``fxdurable demo`` that resumes a turn killed at
  ``tool.after-execute:deploy`` (the killed run is the same one that timed the first step).

Each is measured ``reps`` times, interleaved, after one untimed warm-up round, and reported as
median and min–max: on a shared machine the spread says how far to trust the median, and the
process's CPU time (user + system, at the same moment) is printed beside it, since it barely
moves when other processes take the cores. The bare
interpreter (``python -c pass``) is the floor every figure stands on. The processes cache their
bytecode (in the bench's temporary directory, ``PYTHONPYCACHEPREFIX``), as an installed package
does, even where ``PYTHONDONTWRITEBYTECODE`` is set: compiling every module from source on
every start would double what is measured.
"""

from __future__ import annotations

import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.redis_server import RedisServer, terminate, unavailable_reason

__all__ = ["StartupFigures", "measure_startup", "render_startup"]

CRASH_AT = "tool.after-execute:deploy"
FIRST_STEP = "model:"  # the demo's line for a model step
DEMO_AGENTS = "fxdurable.cli.demo_agent:agents"
READY_TIMEOUT_S = 30.0
TARGETS_S = {"import": 0.15, "worker": 0.30, "first_step": 0.30, "recovery": 0.50}

_LABELS = {
    "python": "python -c pass (the floor)",
    "import": "import fxdurable",
    "public_api": "from fxdurable import Agent, Runtime, tool",
    "worker": "worker ready (spawn → registered with Redis)",
    "first_step": "demo first step (spawn → first model step printed)",
    "recovery": f"demo recovery after --crash-at {CRASH_AT} (wall)",
}


@dataclass(frozen=True, slots=True)
class StartupFigures:
    """Seconds per repetition, keyed by case (``_LABELS``); ``worker_note`` says why the
    worker row is missing, when it is."""

    reps: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # CPU seconds, same moments
    worker_note: str | None = None

    def median(self, case: str) -> float:
        return statistics.median(self.samples[case])


# (wall seconds, CPU seconds of the measured process)
_Timed = tuple[float, float]


def _cpu_so_far(pid: int) -> float:
    """CPU seconds (user + system) the live process ``pid`` has used so far (from /proc;
    NaN where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _env(pycache: Path) -> dict[str, str]:
    unset = ("FXD_CRASH_AT", "NO_COLOR", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _wall(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> _Timed:
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, timeout=60)
    return time.perf_counter() - start, _children_cpu() - cpu


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _fxd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fxdurable", *args]


def _demo_until_crash(directory: Path, env: dict[str, str]) -> _Timed:
    """From spawn to the first model step's line; the run goes on to its crash."""
    start = time.perf_counter()
    first: _Timed | None = None
    output = []
    with subprocess.Popen(
        _fxd("demo", "--dir", str(directory), "--crash-at", CRASH_AT),
        cwd=directory.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if first is None and line.strip().startswith(FIRST_STEP):
                first = time.perf_counter() - start, _cpu_so_far(proc.pid)
        code = proc.wait(timeout=60)
    if first is None or code != -signal.SIGKILL:
        raise RuntimeError(f"the demo did not crash after a model step (exit {code}):\n{output}")
    return first


def _recovery(directory: Path, env: dict[str, str]) -> _Timed:
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(
        _fxd("demo", "--dir", str(directory)),
        cwd=directory.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    timed = time.perf_counter() - start, _children_cpu() - cpu
    if proc.returncode != 0 or "Recovering" not in proc.stdout:
        raise RuntimeError(f"the demo did not recover (exit {proc.returncode}):\n{proc.stdout}")
    return timed


class _WorkerReady:
    """Spawns ``fxdurable worker`` and times it until its RQ registration appears."""

    def __init__(self, tmp: Path, server: RedisServer, env: dict[str, str]) -> None:
        import redis

        from fxdurable.backends import open_store

        self.tmp = tmp
        self.queue_url = f"rq://127.0.0.1:{server.port}/0?queue=startup"
        self.store_url = f"sqlite:///{(tmp / 'worker.db').resolve()}"
        open_store(self.store_url).close()  # an existing store, as a restarted worker finds
        self.redis = redis.Redis(host="127.0.0.1", port=server.port)
        self.env = env
        self.count = 0

    def measure(self) -> _Timed:
        self.count += 1
        name = f"startup-{self.count}"
        start = time.perf_counter()
        proc = subprocess.Popen(
            _fxd(
                "worker",
                *("--queue", self.queue_url, "--store", self.store_url),
                *("--agents", DEMO_AGENTS, "--name", name, "--scan-interval", "60"),
            ),
            cwd=self.tmp,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = start + READY_TIMEOUT_S
            while not self.redis.exists(f"rq:worker:{name}"):
                if proc.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"fxdurable worker did not register (exit {proc.poll()})")
                time.sleep(0.002)
            return time.perf_counter() - start, _cpu_so_far(proc.pid)
        finally:
            terminate(proc, timeout_s=15)

    def close(self) -> None:
        self.redis.close()


def measure_startup(tmp_dir: Path, reps: int, *, warm_up: bool = True) -> StartupFigures:
    """Every case ``reps`` times, interleaved, after a warm-up round (unless ``warm_up`` is
    false: a smoke test's first round then compiles the bytecode); the worker rows only where
    Redis runs."""
    tmp = tmp_dir / "startup"
    tmp.mkdir(parents=True, exist_ok=True)
    env = _env(tmp / "pycache")
    samples: dict[str, list[float]] = {case: [] for case in _LABELS}
    cpu: dict[str, list[float]] = {case: [] for case in _LABELS}
    note = unavailable_reason()
    server: RedisServer | None = None
    worker: _WorkerReady | None = None
    if note is None:
        server = RedisServer(tmp / "redis", appendonly=False)
        server.start()
        worker = _WorkerReady(tmp, server, env)
    else:
        del samples["worker"], cpu["worker"]
    try:
        for rep in range(-1 if warm_up else 0, reps):  # round -1 warms the cache up, untimed
            timed = {
                "python": _wall(_python("pass"), tmp, env),
                "import": _wall(_python("import fxdurable"), tmp, env),
                "public_api": _wall(
                    _python("from fxdurable import Agent, Runtime, tool"), tmp, env
                ),
                "first_step": _demo_until_crash(tmp / f"demo{rep}", env),
                "recovery": _recovery(tmp / f"demo{rep}", env),
            }
            if worker is not None:
                timed["worker"] = worker.measure()
            if rep >= 0:
                for case, (wall, cpu_s) in timed.items():
                    samples[case].append(wall)
                    cpu[case].append(cpu_s)
    finally:
        if worker is not None:
            worker.close()
        if server is not None:
            server.stop()
    return StartupFigures(reps=reps, samples=samples, cpu=cpu, worker_note=note)


def render_startup(figures: StartupFigures) -> str:
    """The startup section: one row per case, wall median and min–max, the CPU median, and
    the issue's target (for the wall)."""
    width = max(len(label) for label in _LABELS.values())
    lines = [
        f"startup (a fresh python process each, bytecode cached; median and min–max of "
        f"{figures.reps}, after a warm-up; cpu = user + system of that process)",
        "",
        f"{'case':<{width}} {'wall s':>7} {'min–max s':>13} {'cpu s':>7} {'target s':>9}",
    ]
    for case, label in _LABELS.items():
        if case not in figures.samples:
            lines.append(f"{label:<{width}} skipped: {figures.worker_note}")
            continue
        values = figures.samples[case]
        target = TARGETS_S.get(case)
        lines.append(
            f"{label:<{width}} {figures.median(case):>7.3f} "
            f"{f'{min(values):.3f}–{max(values):.3f}':>13} "
            f"{statistics.median(figures.cpu[case]):>7.3f} "
            f"{f'≤ {target:.2f}' if target is not None else '':>9}"
        )
    return "\n".join(lines)
