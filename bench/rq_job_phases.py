"""Where an RQ job's time goes: ``python -m bench.rq_job_phases``.

Runs ``fxdurable worker`` (:func:`fxdurable.workers.rq_worker.run_worker`, ``burst``) in this
process over ``--jobs`` one-turn sessions of the bench agent, with the worker's and the job's
pieces wrapped in timers and counters: the fork (parent before ``os.fork`` to the horse's
first instruction), the job function, the setup of its context (store open with its schema
check, event loop, queue client, wake handler), the turn itself, the close, and the worker's
whole ``execute_job`` per job (fork, horse and RQ's bookkeeping in both processes). Each
process (the worker, every horse) appends what it counted to a file once per job; the table
gives the median per job and the counts per job, which do not depend on how loaded the
machine is. ``--profile DIR`` also writes a cProfile of every job function (``pstats``).

It measures the setup code wherever it runs (the worker before any fork, or each horse);
figures from a loaded machine are noisy, the counts are not.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.redis_server import RedisServer
from bench.runtime_turns import PROMPT, SETTINGS, bench_agent
from bench.sqlite_steps import sqlite_url
from fxdurable import Runtime
from fxdurable.backends import open_store

__all__ = ["counts", "main"]

AGENTS_SPEC = "bench.runtime_turns:bench_agent"

#: (module, attribute path, label): what is timed and counted, where it exists.
_TIMED: tuple[tuple[str, str, str], ...] = (
    ("fxdurable.workers.rq_job", "run_wake", "job function"),
    ("fxdurable.workers.warm", "WarmContext.__init__", "context setup"),
    ("fxdurable.workers.warm", "WarmContext.close", "context close"),
    ("fxdurable.workers.warm", "load_agents", "agents loaded"),
    ("fxdurable.workers.warm", "open_store", "store opened"),
    ("fxdurable.workers.warm", "open_queue", "queue client opened"),
    ("fxdurable.workers.warm", "WakeHandler", "wake handler built"),
    ("fxdurable.runtime.worker", "WakeHandler.handle", "turn (handler.handle)"),
    ("fxdurable.stores.sqlite", "SqliteStore._migrate", "schema check (SQLite)"),
    ("fxdurable.stores.sqlite", "SqliteStore._open_connection", "SQLite connection opened"),
    ("fxdurable.stores.redis", "RedisStore._open", "schema check (Redis)"),
    ("fxdurable.stores.redis", "RedisStore.close", "store closed (Redis)"),
    ("asyncio", "new_event_loop", "event loop created"),
    ("threading", "Thread.start", "thread started"),
    ("fxdurable.workers.rq_worker_class", "FxdWorker.execute_job", "worker: execute_job"),
    ("fxdurable.workers.rq_worker_class", "FxdSimpleWorker.execute_job", "worker: execute_job"),
)

_calls: Counter[str] = Counter()
_seconds: defaultdict[str, float] = defaultdict(float)
_cpu: defaultdict[str, float] = defaultdict(float)  # the process's, all its threads
_out: Path | None = None
_profile_dir: Path | None = None
_fork_started = 0.0
_wal: Path | None = None  # a SQLite store's write-ahead log


def _timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if asyncio.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return await fn(*args, **kwargs)
            finally:
                _calls[label] += 1
                _seconds[label] += time.perf_counter() - start
                _cpu[label] += time.process_time() - cpu

        return awaited

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _calls[label] += 1
            _seconds[label] += time.perf_counter() - start
            _cpu[label] += time.process_time() - cpu

    return wrapper


def _dump() -> None:
    """This process's counts since its last dump, as one JSON line."""
    assert _out is not None
    line = {"pid": os.getpid(), "calls": dict(_calls), "seconds": dict(_seconds), "cpu": dict(_cpu)}
    with _out.open("a") as out:
        out.write(json.dumps(line) + "\n")
    _calls.clear()
    _seconds.clear()
    _cpu.clear()


_thread_profiles: list[cProfile.Profile] = []


def _profile_pool_threads() -> None:
    """Profile the work items of thread pools too (store calls, sync tools): cProfile sees
    only the thread that enabled it."""
    from concurrent.futures import thread

    run = thread._WorkItem.run

    def profiled(self: Any) -> None:
        profile = cProfile.Profile()
        _thread_profiles.append(profile)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    thread._WorkItem.run = profiled  # type: ignore[method-assign]


def _job(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The job function: timed, profiled if asked, and this process's counts dumped after it
    (a horse ends with ``os._exit``, so after the job is the last chance)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = time.process_time()
        profile = cProfile.Profile() if _profile_dir is not None else None
        if profile is not None:
            profile.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            if profile is not None:
                profile.disable()
                assert _profile_dir is not None
                stamp = f"{os.getpid()}-{time.time_ns()}"
                profile.dump_stats(_profile_dir / f"job-{stamp}.pstats")
                for n, pool_profile in enumerate(_thread_profiles):
                    pool_profile.dump_stats(_profile_dir / f"pool-{stamp}-{n}.pstats")
                _thread_profiles.clear()
            after = resource.getrusage(resource.RUSAGE_SELF)
            _calls["job: minor page faults"] += after.ru_minflt - usage.ru_minflt
            _calls["job: voluntary switches"] += after.ru_nvcsw - usage.ru_nvcsw
            _calls["job: CPU ms (all threads)"] += round((time.process_time() - cpu) * 1000)
            if _wal is not None and not _wal.exists():  # its last close checkpointed it away
                _calls["job: SQLite WAL deleted at its end"] += 1
            _dump()

    return wrapper


def _instrument() -> None:
    import importlib

    for module_name, path, label in _TIMED:
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            continue
        wrapped = _timed(label, getattr(owner, name))
        setattr(owner, name, _job(wrapped) if label == "job function" else wrapped)

    def before() -> None:
        global _fork_started
        _fork_started = time.perf_counter()

    def in_child() -> None:
        _calls.clear()  # the parent's counts are the parent's
        _seconds.clear()
        _cpu.clear()
        _calls["fork"] += 1
        _seconds["fork"] += time.perf_counter() - _fork_started

    os.register_at_fork(before=before, after_in_child=in_child)


async def _submit(store_url: str, queue_url: str, jobs: int) -> None:
    async with Runtime([bench_agent()], store=store_url, queue=queue_url) as rt:
        for i in range(jobs):
            await rt.session(f"phase-{i}").submit(PROMPT)


def _table(lines: list[dict[str, Any]], jobs: int) -> str:
    """Per job: the mean time in each piece (all its calls, wherever they ran) and how many
    calls it took; the median of the job function's per-job time beside it."""
    seconds: defaultdict[str, float] = defaultdict(float)
    cpu: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    job_times = []
    for line in lines:
        for label, spent in line["seconds"].items():
            seconds[label] += spent
        for label, spent in line.get("cpu", {}).items():
            cpu[label] += spent
        calls.update(line["calls"])
        if "job function" in line["seconds"]:
            job_times.append(line["seconds"]["job function"] * 1e6)
    rows = [f"{'piece':<30} {'µs/job':>10} {'CPU µs/job':>10} {'calls/job':>10}"]
    for label in sorted(seconds, key=lambda k: -seconds[k]):
        rows.append(
            f"{label:<30} {seconds[label] / jobs * 1e6:>10.0f} {cpu[label] / jobs * 1e6:>10.0f} "
            f"{calls[label] / jobs:>10.2f}"
        )
    for label in sorted(set(calls) - set(seconds)):
        rows.append(f"{label:<30} {'':>10} {'':>10} {calls[label] / jobs:>10.1f}")
    rows.append(f"(job function, median per job: {statistics.median(job_times):.0f} µs)")
    return "\n".join(rows)


def counts(lines: list[dict[str, Any]], worker_pid: int) -> dict[str, dict[str, int]]:
    """The calls counted in the worker process and, summed, in its work horses (none in a
    ``nofork`` run): what is made once per worker and what once per job."""
    found: dict[str, Counter[str]] = {"worker": Counter(), "horses": Counter()}
    for line in lines:
        found["worker" if line["pid"] == worker_pid else "horses"].update(line["calls"])
    return {side: dict(calls) for side, calls in found.items()}


def main(argv: Sequence[str] | None = None) -> int:
    global _out, _profile_dir, _wal
    parser = argparse.ArgumentParser(prog="python -m bench.rq_job_phases")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    parser.add_argument("--mode", choices=("fork", "nofork"), default="fork")
    parser.add_argument("--profile", type=Path, default=None, help="a directory for pstats")
    parser.add_argument(
        "--json", action="store_true", help="print the counts only, as JSON (for tests)"
    )
    args = parser.parse_args(argv)
    from fxdurable.workers.config import WorkerConfig
    from fxdurable.workers.rq_worker import run_worker

    quiet = logging.StreamHandler(sys.stderr)  # RQ's lines, else one per job step on stdout
    quiet.setLevel(logging.WARNING)
    logging.getLogger("rq.worker").addHandler(quiet)
    os.environ["FXD_LEASE_TTL_S"] = str(SETTINGS.lease_ttl_s)
    os.environ["FXD_HEARTBEAT_S"] = str(SETTINGS.heartbeat_s)
    with (
        tempfile.TemporaryDirectory(prefix="fxd-rq-phases-") as tmp,
        RedisServer(Path(tmp) / "redis", appendonly=False) as server,
    ):
        if args.store == "sqlite":
            store_url = sqlite_url(Path(tmp) / "phases.db")
            _wal = Path(tmp) / "phases.db-wal"
        else:
            store_url = server.store_url(1, "phases")
        open_store(store_url).close()
        queue_url = f"rq://127.0.0.1:{server.port}/0?queue=phases&job_timeout=600"
        asyncio.run(_submit(store_url, queue_url, args.jobs))
        _out = Path(tmp) / "phases.jsonl"
        _profile_dir = args.profile
        if _profile_dir is not None:
            _profile_dir.mkdir(parents=True, exist_ok=True)
            _profile_pool_threads()
        _instrument()
        started = time.perf_counter()
        run_worker(
            WorkerConfig(store_url, queue_url, AGENTS_SPEC),
            burst=True,
            fork=args.mode == "fork",
            scan_interval_s=3600.0,
        )
        elapsed = time.perf_counter() - started
        _dump()  # the worker's own (its execute_job calls, its start-up)
        lines = [json.loads(line) for line in _out.read_text().splitlines()]
    if args.json:
        print(json.dumps(counts(lines, os.getpid()), sort_keys=True))
        return 0
    print(
        f"{args.jobs} jobs, {args.store} store, {args.mode} mode: "
        f"{args.jobs / elapsed:.1f} turns/s (worker start-up included)"
    )
    print(_table(lines, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
