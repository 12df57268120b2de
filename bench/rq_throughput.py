"""Turns per second on RQ worker processes, beside RQ's own no-op job rate in the same run.

Both sides run stock RQ's forking worker (``rq.Worker``: one work horse forked per job), so
the ratio is what fxdurable's job costs over an RQ job that does nothing:

* baseline: ``rq worker -w rq.Worker`` running :func:`bench.rq_noop.noop`, enqueued with the
  options :class:`~fxdurable.queues.rq.RqQueue` gives a wake (job timeout, ``result_ttl=0``,
  ``failure_ttl``);
* fxdurable: ``fxdurable worker`` (a subclass of ``rq.Worker`` that only forwards a warm
  shutdown to the horse) running one-turn sessions of the bench agent (3 model steps and 2 tool
  calls with the ScriptedModel, as :mod:`bench.runtime_turns`), submitted through
  ``Runtime(queue="rq://...")``, which only admits and enqueues; on a SQLite store
  (``synchronous=FULL``, in the bench's directory) and on a Redis store (the queue's server).

Each worker set (1 or 2 processes per case) is started before any clock, warmed up with a few
jobs, and reused for every repetition; cases alternate (no-op, SQLite, Redis; 1 worker, then 2)
so a drift lands on all of them. The workers listen rather than run ``--burst``: a burst worker
started against a filled queue would time its own start-up, and ``fxdurable worker`` begins with
a reconciliation scan that enqueues a wake for every session with queued work and no owner
(every submission already waiting), so each turn would also run a duplicate wake. The periodic
scan is set to an hour for the same reason: every scan of every worker enqueues one more wake for
each session still waiting in the queue, so with the default 5 s a run whose backlog outlasts an
interval counts those duplicates too (the jobs-per-turn column would show them). Lease timers are
those of :data:`bench.runtime_turns.SETTINGS`.

The clock starts before the first enqueue or submit and stops when the last no-op job has
finished (RQ's per-worker counters) or the last submission has settled (read from the store,
polled every few milliseconds). Jobs per turn are the RQ jobs the workers executed (their
``successful_job_count`` and ``failed_job_count``, read once the queue has drained) per turn:
a wake, plus any continuation or re-wake fxdurable enqueued. Attempts per turn come from the
store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
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
from bench.runtime_turns import PROMPT, SETTINGS, bench_agent
from bench.sqlite_steps import sqlite_url
from fxdurable import Runtime
from fxdurable.backends import open_store
from fxdurable.core.states import SubmissionStatus

__all__ = ["KINDS", "WORKER_COUNTS", "RqFigures", "RqRun", "measure_rq_throughput"]

KINDS = ("noop", "sqlite", "redis")
WORKER_COUNTS = (1, 2)
REPO = Path(__file__).resolve().parents[1]
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
    runs: dict[tuple[str, int], list[RqRun]]  # (kind, workers) -> one run per repetition

    def _runs(self, kind: str, workers: int) -> list[RqRun]:
        return self.runs[(kind, workers)]

    def rate(self, kind: str, workers: int) -> float:
        """Items per second: the median over the repetitions."""
        return statistics.median(r.items / r.seconds for r in self._runs(kind, workers))

    def items(self, kind: str, workers: int) -> int:
        return self._runs(kind, workers)[0].items

    def reps(self) -> int:
        return len(next(iter(self.runs.values())))

    def jobs_per_item(self, kind: str, workers: int) -> float:
        runs = self._runs(kind, workers)
        return sum(r.jobs for r in runs) / sum(r.items for r in runs)

    def attempts_per_item(self, kind: str, workers: int) -> float:
        runs = self._runs(kind, workers)
        return sum(r.attempts for r in runs) / sum(r.items for r in runs)

    def submit_share(self, kind: str, workers: int) -> float:
        """The part of the timed span spent enqueueing or submitting (median)."""
        return statistics.median(r.submit_seconds / r.seconds for r in self._runs(kind, workers))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    env["FXD_LEASE_TTL_S"] = str(SETTINGS.lease_ttl_s)
    env["FXD_HEARTBEAT_S"] = str(SETTINGS.heartbeat_s)
    return env


def _rq_script() -> str:
    """The ``rq`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "rq"
    return str(script) if script.exists() else "rq"


class WorkerGroup:
    """The worker processes of one case, on a queue of their own."""

    def __init__(
        self, kind: str, workers: int, *, server: RedisServer, tmp: Path, token: str
    ) -> None:
        import redis

        self.kind = kind
        self.workers = workers
        self.queue_name = f"bench-{kind}-{workers}-{token}"
        self.queue_url = (
            f"rq://127.0.0.1:{server.port}/{QUEUE_DB}"
            f"?queue={self.queue_name}&job_timeout={JOB_TIMEOUT_S}"
        )
        self.redis_url = server.url(QUEUE_DB)
        self.store_url: str | None = None
        if kind == "sqlite":
            self.store_url = sqlite_url(tmp / f"rq-{workers}.db")  # FULL, the store's default
        elif kind == "redis":
            self.store_url = redis_store_url(server, f"bench-rq{workers}-{token}")
        self.names = [f"{self.queue_name}-w{n}" for n in range(workers)]
        self.logs = [tmp / "rq-logs" / f"{name}.log" for name in self.names]
        self.redis: Any = redis.Redis(host="127.0.0.1", port=server.port, db=QUEUE_DB)
        self._procs: list[subprocess.Popen[bytes]] = []
        self._failed0 = 0

    @property
    def label(self) -> str:
        return f"{self.kind} x{self.workers}"

    def _command(self, name: str) -> list[str]:
        if self.kind == "noop":
            return [
                _rq_script(), "worker",
                "--url", self.redis_url,
                "--worker-class", "rq.Worker",
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
        ]  # fmt: skip

    def start(self) -> None:
        if self.store_url is not None:
            open_store(self.store_url).close()  # created once, before any worker opens it
        env = _env()
        for name, log in zip(self.names, self.logs, strict=True):
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("wb") as out:
                self._procs.append(
                    subprocess.Popen(
                        self._command(name),
                        cwd=log.parent,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

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
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
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
) -> RqFigures:
    """``turns`` items per run (no-op jobs or one-turn sessions), ``reps`` runs per case."""
    token = uuid.uuid4().hex[:8]
    groups = {
        (kind, workers): WorkerGroup(kind, workers, server=server, tmp=tmp, token=token)
        for workers in WORKER_COUNTS
        for kind in kinds
    }
    runs: dict[tuple[str, int], list[RqRun]] = {key: [] for key in groups}
    try:
        for group in groups.values():
            group.start()
        for group in groups.values():
            group.wait_ready()
        for group in groups.values():  # the first jobs of a worker are not counted
            _run(group, "warm-up", 2 * group.workers)
        on_progress(f"{sum(WORKER_COUNTS) * len(kinds)} RQ workers started and warmed up")
        for rep in range(reps):
            for key, group in groups.items():
                runs[key].append(_run(group, f"rep{rep}", turns))
            on_progress(f"RQ throughput: repetition {rep + 1} of {reps} done")
    finally:
        for group in groups.values():
            group.stop()
    return RqFigures(runs=runs)
