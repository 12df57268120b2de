"""Turns per second on RQ worker processes, beside RQ's own no-op job rate in the same run.

Both sides of a ratio run the same RQ worker class, in one of two modes, so the ratio is what
fxdurable's job costs over an RQ job that does nothing:

* ``fork``: stock RQ's forking worker (``rq.Worker``: one work horse forked per job) running
  the no-op, beside ``fxdurable worker`` (a subclass of it);
* ``nofork``: RQ's ``rq.SimpleWorker`` (every job in the worker process) running the no-op,
  beside ``fxdurable worker --no-fork`` (a subclass of it, whose jobs share one warm context:
  store, event loop, thread pool, queue client and wake handler).

* baseline: ``rq worker -w <class>`` running :func:`bench.rq_noop.noop`, enqueued with the
  options :class:`~fxdurable.queues.rq.RqQueue` gives a wake (job timeout, ``result_ttl=0``,
  ``failure_ttl``);
* fxdurable: ``fxdurable worker [--no-fork]`` running one-turn sessions of the bench agent (3
  model steps and 2 tool calls with the ScriptedModel, as :mod:`bench.runtime_turns`; the
  issue's "3 tool calls per turn" counts the final answer's step), submitted through
  ``Runtime(queue="rq://...")``, which only admits and enqueues; on a SQLite store
  (``synchronous=FULL``, in the bench's directory) and on a Redis store (the queue's server).

Each worker set (1 or 2 processes per case) is started before any clock, warmed up with a few
jobs, and reused for every repetition; cases alternate (no-op, SQLite, Redis; 1 worker, then 2;
each mode) so a drift lands on all of them. The workers listen rather than run ``--burst``: a
burst worker started against a filled queue would time its own start-up, and ``fxdurable
worker`` begins with a reconciliation scan that enqueues a wake for every session with queued
work and no owner (every submission already waiting), so each turn would also run a duplicate
wake. The periodic scan is set to an hour for the same reason: every scan of every worker
enqueues one more wake for each session still waiting in the queue, so with the default 5 s a
run whose backlog outlasts an interval counts those duplicates too (the jobs-per-turn column
would show them). Lease timers are those of :data:`bench.runtime_turns.SETTINGS`.

What bounds each ratio: the no-op measures RQ's own per-job cost (its Redis bookkeeping, plus
the fork in ``fork`` mode); a turn adds its own store calls (each step's commits, fsynced at
``synchronous=FULL``) and, in ``fork`` mode, a cold context per horse (new event loop, thread
pool and store connections), which ``nofork`` keeps warm. ``nofork`` turns per second are the
higher figure; its ratio is the lower one, because SimpleWorker's no-op is so much cheaper.

The clock starts before the first enqueue or submit and stops when the last no-op job has
finished (RQ's per-worker counters) or the last submission has settled (read from the store,
polled every few milliseconds). Jobs per turn are the RQ jobs the workers executed (their
``successful_job_count`` and ``failed_job_count``, read once the queue has drained) per turn:
a wake, plus any continuation or re-wake fxdurable enqueued. Attempts per turn come from the
store.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.redis_server import RedisServer
from bench.redis_steps import store_url as redis_store_url
from bench.runtime_turns import PROMPT, bench_agent
from bench.sqlite_steps import sqlite_url
from bench.worker_procs import start_worker, stop_workers, worker_env
from fxdurable import Runtime
from fxdurable.backends import open_store
from fxdurable.core.states import SubmissionStatus

__all__ = ["KINDS", "MODES", "WORKER_COUNTS", "RqFigures", "RqRun", "measure_rq_throughput"]

KINDS = ("noop", "sqlite", "redis")
WORKER_COUNTS = (1, 2)
MODES = ("fork", "nofork")
#: The RQ worker class of each mode's no-op baseline (fxdurable's worker subclasses it).
RQ_CLASSES = {"fork": "rq.Worker", "nofork": "rq.SimpleWorker"}
QUEUE_DB = 0
JOB_TIMEOUT_S = 600
NOOP_FUNCTION = "bench.rq_noop.noop"
AGENTS_SPEC = "bench.runtime_turns:bench_agent"
POLL_S = 0.005
READY_TIMEOUT_S = 60.0
SCAN_INTERVAL_S = 3600.0  # no periodic reconciliation scan inside a measurement


@dataclass(frozen=True, slots=True)
class RqRun:
    """One timed run of one case."""

    items: int  # no-op jobs, or turns
    seconds: float  # first enqueue/submit to last job finished / last submission settled
    submit_seconds: float  # of which enqueueing or submitting (the bench process, sequential)
    jobs: int  # RQ jobs the workers executed for these items
    attempts: int  # attempts the store recorded (0 for no-op jobs)


@dataclass(frozen=True, slots=True)
class RqFigures:
    # (kind, workers, mode) -> one run per repetition
    runs: dict[tuple[str, int, str], list[RqRun]]

    def _runs(self, kind: str, workers: int, mode: str) -> list[RqRun]:
        return self.runs[(kind, workers, mode)]

    def modes(self) -> list[str]:
        return [m for m in MODES if any(key[2] == m for key in self.runs)]

    def rate(self, kind: str, workers: int, mode: str = "fork") -> float:
        """Items per second: the median over the repetitions."""
        return statistics.median(r.items / r.seconds for r in self._runs(kind, workers, mode))

    def ratios(self, kind: str, workers: int, mode: str = "fork") -> list[float]:
        """Turns per second / no-op jobs per second, same worker class and count: one per
        repetition (each repetition runs every case once, so its pair is measured side by
        side)."""
        pairs = zip(self._runs(kind, workers, mode), self._runs("noop", workers, mode), strict=True)
        return [(t.items / t.seconds) / (n.items / n.seconds) for t, n in pairs]

    def ratio(self, kind: str, workers: int, mode: str = "fork") -> float:
        """The median of :meth:`ratios`."""
        return statistics.median(self.ratios(kind, workers, mode))

    def ratio_range(self, kind: str, workers: int, mode: str = "fork") -> str:
        """``median (min–max of N reps)``, as the bench prints a ratio."""
        values = self.ratios(kind, workers, mode)
        return (
            f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f} of "
            f"{len(values)} reps)"
        )

    def items(self, kind: str, workers: int, mode: str = "fork") -> int:
        return self._runs(kind, workers, mode)[0].items

    def reps(self) -> int:
        return len(next(iter(self.runs.values())))

    def jobs_per_item(self, kind: str, workers: int, mode: str = "fork") -> float:
        runs = self._runs(kind, workers, mode)
        return sum(r.jobs for r in runs) / sum(r.items for r in runs)

    def attempts_per_item(self, kind: str, workers: int, mode: str = "fork") -> float:
        runs = self._runs(kind, workers, mode)
        return sum(r.attempts for r in runs) / sum(r.items for r in runs)

    def submit_share(self, kind: str, workers: int, mode: str = "fork") -> float:
        """The part of the timed span spent enqueueing or submitting (median)."""
        runs = self._runs(kind, workers, mode)
        return statistics.median(r.submit_seconds / r.seconds for r in runs)


def _rq_script() -> str:
    """The ``rq`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "rq"
    return str(script) if script.exists() else "rq"


class WorkerGroup:
    """The worker processes of one case, on a queue of their own."""

    def __init__(
        self, kind: str, workers: int, mode: str, *, server: RedisServer, tmp: Path, token: str
    ) -> None:
        import redis

        self.kind = kind
        self.workers = workers
        self.mode = mode
        self.queue_name = f"bench-{kind}-{workers}-{mode}-{token}"
        self.queue_url = (
            f"rq://127.0.0.1:{server.port}/{QUEUE_DB}"
            f"?queue={self.queue_name}&job_timeout={JOB_TIMEOUT_S}"
        )
        self.redis_url = server.url(QUEUE_DB)
        self.store_url: str | None = None
        if kind == "sqlite":
            # FULL, the store's default
            self.store_url = sqlite_url(tmp / f"rq-{workers}-{mode}.db")
        elif kind == "redis":
            self.store_url = redis_store_url(server, f"bench-rq{workers}{mode}-{token}")
        self.names = [f"{self.queue_name}-w{n}" for n in range(workers)]
        self.logs = [tmp / "rq-logs" / f"{name}.log" for name in self.names]
        self.redis: Any = redis.Redis(host="127.0.0.1", port=server.port, db=QUEUE_DB)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._failed0 = 0

    @property
    def label(self) -> str:
        return f"{self.kind} x{self.workers} {self.mode}"

    def _command(self, name: str) -> list[str]:
        if self.kind == "noop":
            return [
                _rq_script(), "worker",
                "--url", self.redis_url,
                "--worker-class", RQ_CLASSES[self.mode],
                "--name", name,
                self.queue_name,
            ]  # fmt: skip
        assert self.store_url is not None
        return [
            sys.executable, "-m", "fxdurable", "worker",
            "--queue", self.queue_url,
            "--store", self.store_url,
            "--agents", AGENTS_SPEC,
            "--name", name,
            "--scan-interval", str(SCAN_INTERVAL_S),
            *(["--no-fork"] if self.mode == "nofork" else []),
        ]  # fmt: skip

    def start(self) -> None:
        if self.store_url is not None:
            open_store(self.store_url).close()  # created once, before any worker opens it
        env = worker_env()
        for name, log in zip(self.names, self.logs, strict=True):
            self._procs.append(start_worker(self._command(name), log, env))

    def _log_tails(self) -> str:
        parts = []
        for name, log in zip(self.names, self.logs, strict=True):
            text = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
            parts.append(f"--- {name} ---\n{text}")
        return "\n".join(parts)

    def check_alive(self) -> None:
        dead = [p.returncode for p in self._procs if p.poll() is not None]
        if dead:
            raise RuntimeError(
                f"a {self.label} bench worker exited (codes {dead}):\n{self._log_tails()}"
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        key = f"rq:workers:{self.queue_name}"
        wanted = {f"rq:worker:{name}".encode() for name in self.names}
        while not wanted <= set(self.redis.smembers(key)):
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label} workers did not register:\n{self._log_tails()}")
            time.sleep(0.02)

    def jobs_done(self) -> int:
        """Jobs the workers have finished (succeeded or failed) since they started."""
        with self.redis.pipeline(transaction=False) as pipe:
            for name in self.names:
                pipe.hmget(f"rq:worker:{name}", "successful_job_count", "failed_job_count")
            replies = pipe.execute()
        ok = sum(int(r[0] or 0) for r in replies)
        failed = sum(int(r[1] or 0) for r in replies)
        if failed > self._failed0:
            self._failed0 = failed
            raise RuntimeError(f"a {self.label} bench job failed:\n{self._log_tails()}")
        return ok + failed

    def wait_jobs(self, target: int, deadline: float) -> None:
        while self.jobs_done() < target:
            if time.monotonic() > deadline:
                self.check_alive()
                raise RuntimeError(f"{self.label}: jobs did not finish in time")
            time.sleep(POLL_S)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until the queue is empty and no worker is busy, twice in a row 20 ms apart."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < 2:
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.llen(f"rq:queue:{self.queue_name}")
                for name in self.names:
                    pipe.hget(f"rq:worker:{name}", "state")
                queued, *states = pipe.execute()
            idle = queued == 0 and all(s != b"busy" for s in states)
            quiet = quiet + 1 if idle else 0
            if time.monotonic() > deadline:
                self.check_alive()
                raise RuntimeError(f"{self.label}: the queue did not drain")
            time.sleep(0.02)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL for any worker still running after 15 s."""
        stop_workers(self._procs)
        self._procs.clear()
        self.redis.close()


# -- one timed run ----------------------------------------------------------------------------


def _run_noops(group: WorkerGroup, n: int) -> RqRun:
    import rq

    queue = rq.Queue(group.queue_name, connection=group.redis)
    jobs0 = group.jobs_done()
    deadline = time.monotonic() + 60 + n
    start = time.perf_counter()
    for i in range(n):
        queue.enqueue_call(
            NOOP_FUNCTION,
            timeout=JOB_TIMEOUT_S,
            result_ttl=0,
            failure_ttl=24 * 3600,
            description=f"bench no-op {i}",
        )
    submitted = time.perf_counter()
    group.wait_jobs(jobs0 + n, deadline)
    elapsed = time.perf_counter() - start
    group.wait_idle()
    return RqRun(
        items=n,
        seconds=elapsed,
        submit_seconds=submitted - start,
        jobs=group.jobs_done() - jobs0,
        attempts=0,
    )


async def _run_turns_async(group: WorkerGroup, tag: str, n: int) -> RqRun:
    assert group.store_url is not None
    async with Runtime([bench_agent()], store=group.store_url, queue=group.queue_url) as rt:
        jobs0 = group.jobs_done()
        deadline = time.monotonic() + 60 + 2 * n
        start = time.perf_counter()
        handles = [rt.session(f"{tag}-{i}") for i in range(n)]
        subs = [await h.submit(PROMPT) for h in handles]
        submitted = time.perf_counter()
        for handle, sub in zip(handles, subs, strict=True):
            try:
                settled = await handle.wait(
                    sub.id, timeout=max(1.0, deadline - time.monotonic()), poll_s=POLL_S
                )
            except TimeoutError:
                group.check_alive()
                raise RuntimeError(f"{group.label}: turn {sub.id} did not settle in time") from None
            if settled.status != SubmissionStatus.COMPLETED:
                raise RuntimeError(f"{group.label}: bench turn {sub.id} ended {settled.status}")
        elapsed = time.perf_counter() - start
        await asyncio.to_thread(group.wait_idle)
        jobs = group.jobs_done() - jobs0
        ids = [s.id for s in subs]
        attempts = rt.journal.read(lambda v: sum(len(v.attempts(i)) for i in ids))
    return RqRun(
        items=n,
        seconds=elapsed,
        submit_seconds=submitted - start,
        jobs=jobs,
        attempts=attempts,
    )


def _run(group: WorkerGroup, tag: str, n: int) -> RqRun:
    if group.kind == "noop":
        return _run_noops(group, n)
    return asyncio.run(_run_turns_async(group, tag, n))


# -- the measurement --------------------------------------------------------------------------


def measure_rq_throughput(
    tmp: Path,
    server: RedisServer,
    *,
    turns: int,
    reps: int,
    on_progress: Callable[[str], None],
    kinds: Sequence[str] = KINDS,
    modes: Sequence[str] = ("fork",),
) -> RqFigures:
    """``turns`` items per run (no-op jobs or one-turn sessions), ``reps`` runs per case.

    ``modes`` defaults to ``fork`` alone, the one ``bench.report`` renders (each mode doubles
    this section's time); ``python -m bench.rq_throughput`` measures both."""
    token = uuid.uuid4().hex[:8]
    groups = {
        (kind, workers, mode): WorkerGroup(kind, workers, mode, server=server, tmp=tmp, token=token)
        for mode in modes
        for workers in WORKER_COUNTS
        for kind in kinds
    }
    runs: dict[tuple[str, int, str], list[RqRun]] = {key: [] for key in groups}
    try:
        for group in groups.values():
            group.start()
        for group in groups.values():
            group.wait_ready()
        for group in groups.values():  # the first jobs of a worker are not counted
            _run(group, "warm-up", 2 * group.workers)
        on_progress(f"{len(groups)} RQ worker sets started and warmed up")
        for rep in range(reps):
            for key, group in groups.items():
                runs[key].append(_run(group, f"rep{rep}", turns))
            on_progress(f"RQ throughput: repetition {rep + 1} of {reps} done")
    finally:
        for group in groups.values():
            group.stop()
    return RqFigures(runs=runs)


# -- on its own: python -m bench.rq_throughput ------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Only this measurement, both modes: one line per (kind, workers, mode) and its ratio."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.rq_throughput")
    parser.add_argument("--turns", type=int, default=60, help="items per timed run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    with (
        tempfile.TemporaryDirectory(prefix="fxd-rq-bench-") as tmp,
        RedisServer(Path(tmp) / "redis", appendonly=False) as server,
    ):
        figures = measure_rq_throughput(
            Path(tmp),
            server,
            turns=args.turns,
            reps=args.reps,
            on_progress=lambda line: print(line, file=sys.stderr),
            modes=modes,
        )
    print(
        f"{'kind':<7} {'workers':>7} {'mode':<7} {'items/s':>9} {'jobs/item':>9}  "
        "÷ no-op of the same class: median (range)"
    )
    for kind, workers, mode in figures.runs:
        ratio = "" if kind == "noop" else figures.ratio_range(kind, workers, mode)
        print(
            f"{kind:<7} {workers:>7} {mode:<7} {figures.rate(kind, workers, mode):>9.1f} "
            f"{figures.jobs_per_item(kind, workers, mode):>9.2f}  {ratio}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
