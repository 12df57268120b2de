"""The worker processes of :mod:`bench.pg_workers` and the CPU they (and the server) use.

A :class:`WorkerSet` is ``workers`` ``fxdurable worker --queue postgresql://…`` processes on a
database of their own (created on the bench's server, dropped at :meth:`WorkerSet.stop`),
store and wake queue in one schema of it, plus the :class:`~fxdurable.Runtime` in this process
that admits turns to it (a remote queue: it only admits and enqueues). CPU is utime + stime
from ``/proc/<pid>/stat``: of each worker, and of the server (:func:`server_cpu_s`: the
postmaster, its live children, and the children it reaped).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from bench.pg_noop_agent import AGENT, CALLS_ENV, EFFECTS_ENV, agents
from bench.postgres_server import drop_database, fresh_database
from bench.runtime_turns import SETTINGS
from bench.worker_procs import start_worker, stop_workers, worker_env
from fxdurable import Runtime
from fxdurable.backends import open_store

__all__ = ["SCHEMA", "WorkerSet", "cpu_s", "postmaster_of", "server_cpu_s"]

SCHEMA = "fxdurable"
PROMPT = "Go."
SCAN_INTERVAL_S = 3600.0  # no reconciliation scan inside a measurement (bench.rq_throughput)
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def cpu_s(pid: int, *, reaped: bool = False) -> float:
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: children it waited for
    return ticks / TICK


def server_cpu_s(postmaster: int) -> float:
    """The server's CPU so far: the postmaster, its live children, and the ones it reaped."""
    total = cpu_s(postmaster, reaped=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and fields[1] == str(postmaster):
                total += cpu_s(int(entry.name))
    return total


def postmaster_of(url: str) -> int | None:
    """The server's postmaster pid, when its backends are processes of this host."""
    import psycopg

    # Read the backend's /proc entry while its connection is open: a backend exits as soon as
    # its client closes, and its entry goes with it (CI stop 37 read it after the close).
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        fields = _stat(int(row[0])) if row else None
    return int(fields[1]) if fields is not None else None


class WorkerSet:
    """``workers`` processes on a database of their own, and the Runtime that admits to it."""

    def __init__(
        self, server: str, workers: int, tmp: Path, *, calls: int, concurrency: int
    ) -> None:
        self.workers = workers
        self.calls = calls
        self.concurrency = concurrency
        self.db_url = fresh_database(server, f"pgw{workers}")
        self.url = f"{self.db_url}?schema={SCHEMA}"
        self.root = tmp / f"pg-workers-{workers}"
        self.effects = self.root / "effects"
        self.logs = [self.root / f"worker-{n}.log" for n in range(workers)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self._runner = asyncio.Runner()
        self._rt: Runtime | None = None

    def start(self) -> None:
        self.effects.mkdir(parents=True)
        open_store(self.url).close()  # the schema, once, before any worker opens it
        env = worker_env(**{CALLS_ENV: str(self.calls), EFFECTS_ENV: str(self.effects)})
        command = [
            sys.executable, "-m", "fxdurable", "worker",
            "--queue", self.url,
            "--store", self.url,
            "--agents", "bench.pg_noop_agent:agents",
            "--scan-interval", str(SCAN_INTERVAL_S),
            "--concurrency", str(self.concurrency),
        ]  # fmt: skip
        self.procs = [start_worker(command, log, env) for log in self.logs]
        rt = Runtime(agents(self.calls), store=self.url, queue=self.url, settings=SETTINGS)
        self._runner.run(rt.start())
        self._rt = rt

    def tails(self) -> str:
        return "\n".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')[-1500:]}" for log in self.logs
        )

    def check_alive(self) -> None:
        dead = [p.returncode for p in self.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a Postgres bench worker exited ({dead}):\n{self.tails()}")

    def pids_with_effects(self) -> set[int]:
        return {int(p.stem.removeprefix("effects-")) for p in self.effects.iterdir()}

    def submit(self, tag: str, n: int) -> None:
        rt = self._rt
        assert rt is not None, "start() first"

        async def admit() -> None:
            for i in range(n):
                await rt.session(f"{tag}-{i}", agent=AGENT).submit(PROMPT)

        self._runner.run(admit())

    def stop(self) -> None:
        """SIGTERM (a warm stop), SIGKILL after 15 s; then drop the database."""
        stop_workers(self.procs)
        if self._rt is not None:
            self._runner.run(self._rt.aclose())
        self._runner.close()
        drop_database(self.db_url)
