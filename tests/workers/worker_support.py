"""Real ``fxdurable worker`` processes in tests, whatever their queue (RQ or SQS).

Imported by ``conftest.py`` (which puts this directory on ``sys.path``) and the tests.

A :class:`WorkerHarness` owns one test's world: a store (``store_url``), a queue of its own
(``queue_url``, named by the subclass: ``rq_support.RqHarness``, ``sqs_support.SqsHarness``),
a copy of ``rq_story_agents.py`` under a unique module name on the workers' ``PYTHONPATH``,
and the outside world's logs (``world/``). It starts workers (``python -m fxdurable -v
worker``, stdout/stderr to files under ``logs/``), submits through ``fx.Runtime(agents,
store=..., queue=...)`` (which only admits and enqueues with a remote queue), waits by polling
the store, and reads an at-rest ``World`` for ``assert_invariants`` (the DESIGN §5 checks,
shared with the other crash suites: ``tests.kit.world``).

Every process it starts is stopped at teardown (:meth:`WorkerHarness.cleanup`), RQ work horses
included: a horse is in a process group of its own (RQ calls ``setpgrp``) and outlives a
SIGKILLed parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import fxdurable as fx
from fxdurable.backends import open_store
from fxdurable.core.records import EventRecord, SubmissionRecord
from fxdurable.core.store import Store
from fxdurable.workers.rq_sqlite_keeper import KEEPER_MARK
from tests.kit.story import read_lines, story_agent
from tests.kit.world import SETTLED, World, read_store, read_world

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
AGENTS_SOURCE = HERE / "rq_story_agents.py"
SUBMIT_SCRIPT = HERE / "rq_submit.py"
POLL_S = 0.01

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, *, poll_s: float = 0.02) -> T:
    """Poll until ``predicate()`` is truthy and return it; a timeout fails with ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(poll_s)


# -- processes ---------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process from /proc, or None when it is gone."""
    fields = _stat_fields(pid)
    return None if fields is None else (fields[0], int(fields[1]))


def proc_identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks): a pid may be reused, this pair is not."""
    fields = _stat_fields(pid)
    return None if fields is None else (pid, int(fields[19]))


def proc_wchan(pid: int) -> str:
    """Where in the kernel ``pid`` waits (``futex_wait_queue`` for a lock), for diagnostics."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text() or "running"
    except OSError:
        return "gone"


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def sqlite_write_locked(store_url: str) -> bool:
    """Whether some process holds the write lock of the SQLite store ``store_url`` now (False
    for any other store). Tried with ``BEGIN IMMEDIATE`` and no wait, then rolled back."""
    if not store_url.startswith("sqlite:"):
        return False
    path = unquote(urlparse(store_url).path[1:])
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return True
    finally:
        conn.close()


def freeze_outside_a_commit(pid: int, store_url: str, attempts: int = 100) -> None:
    """SIGSTOP ``pid`` at a moment it holds no SQLite write lock.

    A process frozen inside a SQLite transaction keeps the database's lock, so every other
    writer waits until it resumes or dies: SQLite has no lease on its locks (docs/limits.md
    says so). A test of what a frozen *lease* holder does must not freeze a *lock* holder
    by chance (its heartbeat commits every half second), or the takeover it waits for cannot
    write. Each try that lands inside a commit lets the process go on for a moment."""
    for _ in range(attempts):
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: (proc_stat(pid) or ("?",))[0] == "T", 5, f"process {pid} to stop")
        if not sqlite_write_locked(store_url):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.005)
    raise AssertionError(f"process {pid} held the SQLite write lock at each of {attempts} tries")


def child_pids(parent: int) -> list[int]:
    """Live children of ``parent``, found by scanning /proc (no psutil)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None and stat[1] == parent and stat[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def _is_sqlite_keeper(pid: int) -> bool:
    """Whether a worker's child is its SQLite keeper (fxdurable.workers.rq_sqlite_keeper),
    not a work horse."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return KEEPER_MARK.encode() in argv


def process_group_alive(pgid: int) -> bool:
    """Whether any live process of this host is in process group ``pgid`` (field 3 of
    /proc/<pid>/stat after the command name)."""
    for entry in os.listdir("/proc"):
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


@dataclass
class WorkerProc:
    """One ``fxdurable worker`` process (an RQ parent, or an SQS worker) and its log files."""

    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    ready_mark: str = "*** Listening on"  # what the worker logs once it takes wakes
    horses_seen: set[tuple[int, int]] = field(default_factory=set)  # proc_identity()s
    # An RQ worker forks a horse per job; an SQS worker runs its wakes itself, so a child of
    # it is no horse (a shell tool's command: killing it with the worker would hide whether
    # the worker's death takes it down).
    forks_horses: bool = True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        text = self.err.read_text(errors="replace") if self.err.exists() else ""
        out = self.out.read_text(errors="replace") if self.out.exists() else ""
        return text + (f"\n--- stdout ---\n{out}" if out else "")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def horses(self) -> list[int]:
        """The live work horse(s): RQ forks one per job (an SQS worker has none)."""
        pids = child_pids(self.pid) if self.forks_horses and self.alive() else []
        pids = [pid for pid in pids if not _is_sqlite_keeper(pid)]
        self.horses_seen.update(i for i in map(proc_identity, pids) if i is not None)
        return pids

    def wait_ready(self, timeout: float = 20.0) -> None:
        """Wait until the worker says it takes wakes. A worker that said so and has already
        died (one whose crash point is its first wake's first step) was ready: only one that
        died before saying it exited early."""

        def ready() -> bool:
            # Liveness first, then the log: a worker seen dead has written all it ever will.
            alive = self.alive()
            if self.ready_mark in self.log():
                return True
            if not alive:
                raise AssertionError(f"worker {self.name} exited early:\n{self.log()}")
            return False

        wait_until(ready, timeout, f"worker {self.name} to listen")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0, *, send: bool = True) -> int:
        """Send ``sig`` to the worker and wait for it to exit; returns its exit code.

        One signal only: a second SIGTERM is RQ's cold shutdown (it SIGKILLs the horse)."""
        if send and self.alive():
            self.horses()
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"worker {self.name} did not exit within {timeout:g}s of "
                f"{signal.Signals(sig).name}:\n{self.log()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL the horses and the parent (a power cut); safe to call twice.

        Horses outlive a killed parent (each is in a process group of its own), so every horse
        this worker was seen with is killed too, if that very process (pid and start time)
        still exists: a reused pid belongs to someone else."""
        self.horses()
        doomed = [pid for pid, start in self.horses_seen if proc_identity(pid) == (pid, start)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        # Orphaned horses are reaped by PID 1; wait until they are at least dead.
        for pid in doomed:
            deadline = time.monotonic() + 5
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.01)


# -- the harness -----------------------------------------------------------------------------


class WorkerHarness:
    """One test's store, queue, agents module, outside world and worker processes. A
    subclass names the queue (:attr:`queue_url`), how a worker says it is ready
    (:attr:`ready_mark`), and what else its workers need (:meth:`worker_args`,
    :meth:`queue_env`)."""

    ready_mark = ""
    forks_horses = True  # see WorkerProc

    def __init__(
        self,
        root: Path,
        *,
        store_url: str,
        lease_ttl_s: float = 3.0,
        heartbeat_s: float = 0.5,
        scan_interval_s: float = 0.5,
    ) -> None:
        self.root = root
        self.store_url = store_url
        self.lease_ttl_s = lease_ttl_s
        self.heartbeat_s = heartbeat_s
        self.scan_interval_s = scan_interval_s
        token = uuid.uuid4().hex[:10]
        self.world_dir = root / "world"
        self.mods = root / "mods"
        self.logs = root / "logs"
        for path in (self.world_dir, self.mods, self.logs):
            path.mkdir(parents=True, exist_ok=True)
        self.module = f"fxd_rq_agents_{token}"
        shutil.copyfile(AGENTS_SOURCE, self.mods / f"{self.module}.py")
        self.queue_name = f"fxd-test-{token}"
        self.workers: list[WorkerProc] = []
        self.host = socket.gethostname()
        self._reader: Store | None = None  # see read()
        self._agents: Callable[[], list[fx.Agent]] | None = None  # see use_agents()
        self._agents_env: dict[str, str] = {}

    # -- configuration ---------------------------------------------------------------------

    @property
    def queue_url(self) -> str:
        raise NotImplementedError

    def queue_env(self) -> dict[str, str]:
        """What a process needs in its environment to use the queue."""
        return {}

    def worker_args(self, name: str) -> list[str]:
        """``fxdurable worker`` arguments of this kind of queue."""
        return []

    def use_agents(
        self,
        source: Path,
        agents: Callable[[], list[fx.Agent]],
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Serve the agents of ``source`` (a module with an ``agents()`` function, like
        ``rq_story_agents.py``) instead of the story agent; ``agents`` builds the same ones
        (same names) for the submitting process; ``env``: what every process started gets
        (their configuration). Before any worker starts."""
        shutil.copyfile(source, self.mods / f"{self.module}.py")
        self._agents = agents
        self._agents_env = dict(env or {})

    @property
    def agents_spec(self) -> str:
        return f"{self.module}:agents"

    def env(self, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(self.mods), str(HERE), str(REPO), env.get("PYTHONPATH")])
        )
        env["PYTHONUNBUFFERED"] = "1"
        env["NO_COLOR"] = "1"
        env.update(
            FXD_STORE=self.store_url,
            FXD_QUEUE=self.queue_url,
            FXD_AGENTS=self.agents_spec,
            FXD_LEASE_TTL_S=str(self.lease_ttl_s),
            FXD_HEARTBEAT_S=str(self.heartbeat_s),
            FXD_SCAN_INTERVAL_S=str(self.scan_interval_s),
            # Sessions nobody holds are re-woken after 2 s without activity, not 30 s.
            FXD_SCAN_QUIET_S="2",
            FXD_TEST_WORLD=str(self.world_dir),
        )
        env.update(self.queue_env())
        env.update(self._agents_env)
        for key, value in (extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    # -- workers -----------------------------------------------------------------------------

    def start_worker(
        self,
        *,
        crash_plan: Sequence[str] = (),
        env: Mapping[str, str | None] | None = None,
        scan_interval_s: float | None = None,
        args: Sequence[str] = (),
        ready: bool = True,
    ) -> WorkerProc:
        """Start ``fxdurable worker``. ``crash_plan``: the horses SIGKILL themselves at these
        points, one per job, in order (see ``rq_story_agents``); the parent survives."""
        n = len(self.workers) + 1
        name = f"{self.queue_name}-w{n}"
        out, err = self.logs / f"worker-{n}.out", self.logs / f"worker-{n}.err"
        extra: dict[str, str | None] = {}
        if crash_plan:
            extra.update(
                FXD_CRASH_AT=crash_plan[0],
                FXD_TEST_CRASH_PLAN=",".join(crash_plan),
                FXD_TEST_CRASH_LOG=str(err),
            )
        extra.update(env or {})
        interval = self.scan_interval_s if scan_interval_s is None else scan_interval_s
        argv = [sys.executable, "-m", "fxdurable", "-v", "worker", *self.worker_args(name)]
        argv += ["--scan-interval", str(interval), *args]
        with out.open("ab") as out_f, err.open("ab") as err_f:
            proc = subprocess.Popen(
                argv,
                cwd=self.root,
                env=self.env(extra),
                stdin=subprocess.DEVNULL,
                stdout=out_f,
                stderr=err_f,
                start_new_session=True,
            )
        worker = WorkerProc(
            name, proc, out, err, ready_mark=self.ready_mark, forks_horses=self.forks_horses
        )
        self.workers.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    def start_workers(self, n: int, **kwargs: Any) -> list[WorkerProc]:
        workers = [self.start_worker(ready=False, **kwargs) for _ in range(n)]
        for worker in workers:
            worker.wait_ready()
        return workers

    def stop_workers(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> list[int]:
        """Warm-stop every running worker; returns their exit codes."""
        running = [w for w in self.workers if w.alive()]
        for worker in running:
            worker.horses()
            worker.proc.send_signal(sig)
        return [w.stop(sig, timeout, send=False) for w in running]

    def cleanup(self) -> None:
        for worker in self.workers:
            worker.kill()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def run_cli(
        self, *args: str, env: Mapping[str, str | None] | None = None, timeout: float = 30.0
    ) -> tuple[int, str, str]:
        """``python -m fxdurable ARGS`` with this harness's environment."""
        done = subprocess.run(
            [sys.executable, "-m", "fxdurable", *args],
            cwd=self.root,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    # -- submitting --------------------------------------------------------------------------

    def agents(self) -> list[fx.Agent]:
        return self._agents() if self._agents is not None else [story_agent(self.world_dir)]

    def submit(
        self,
        items: Sequence[tuple[str, str, str]],
        *,
        extra_wakes: Sequence[int] = (),
        pauses_s: Sequence[float] = (),
    ) -> list[str]:
        """Admit ``(session, prompt, request_id)`` items in order through a Runtime in RQ mode;
        after the i-th, enqueue ``extra_wakes[i]`` duplicate wakes for its session, then sleep
        ``pauses_s[i]`` seconds."""

        async def go() -> list[str]:
            ids = []
            async with fx.Runtime(self.agents(), store=self.store_url, queue=self.queue_url) as rt:
                for i, (session, prompt, request_id) in enumerate(items):
                    sub = await rt.session(session).submit(prompt, request_id=request_id)
                    ids.append(sub.id)
                    for _ in range(extra_wakes[i] if i < len(extra_wakes) else 0):
                        await rt.queue.enqueue(session, reason="dup")
                    if i < len(pauses_s):
                        await asyncio.sleep(pauses_s[i])
            return ids

        return asyncio.run(go())

    def submit_one(self, session: str, prompt: str, request_id: str) -> str:
        (sub_id,) = self.submit([(session, prompt, request_id)])
        return sub_id

    def run_submitter(
        self,
        session: str,
        prompt: str,
        request_id: str,
        *,
        crash_at: str | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, str, str]:
        """The submitting process, as a script (``rq_submit.py``): it admits and enqueues."""
        argv = [sys.executable, str(SUBMIT_SCRIPT), "--store", self.store_url]
        argv += ["--queue", self.queue_url, "--session", session, "--prompt", prompt]
        argv += ["--request-id", request_id]
        return self.run_process(argv, crash_at=crash_at, timeout=timeout)

    def run_process(
        self, argv: list[str], *, crash_at: str | None = None, timeout: float = 30.0
    ) -> tuple[int, str, str]:
        """``argv`` in the harness's directory and environment, armed to SIGKILL itself at
        ``crash_at``; its (exit code, stdout, stderr)."""
        done = subprocess.run(
            argv,
            cwd=self.root,
            env=self.env({"FXD_CRASH_AT": crash_at}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout, done.stderr

    # -- reading -----------------------------------------------------------------------------

    def read(self, body: Callable[[Any], T]) -> T:
        """``body(view)`` in one read of the store. A DynamoDB store is opened once and kept:
        opening one makes boto3 clients (about 18 ms of CPU), and the waits below read every
        20 ms, which would take a core from the workers they wait for. Other stores are
        opened afresh each time, as :meth:`world` always does (the invariants are read from
        scratch, never through a cache)."""
        if not self.store_url.startswith("dynamodb://"):
            return read_store(self.store_url, body)
        if self._reader is None:
            self._reader = open_store(self.store_url)
        return self._reader.read(body)

    def events(self, session_id: str) -> list[EventRecord]:
        return self.read(lambda v: list(v.events(session_id)))

    def wait_event(
        self, session_id: str, predicate: Callable[[EventRecord], bool], timeout: float = 30.0
    ) -> EventRecord:
        def found() -> EventRecord | None:
            return next((e for e in self.events(session_id) if predicate(e)), None)

        return wait_until(found, timeout, f"an event in session {session_id}")

    def wait_tool_running(self, session_id: str, tool: str, timeout: float = 30.0) -> None:
        """Until the story's ``tool`` is inside its body: its ``tool.started`` event is
        recorded and it logged its call to ``calls.log``. The event is written before the body
        runs, so a kill right after it alone can land before the call line (seen under load:
        a test then counts 0 calls where the body did run once)."""
        self.wait_event(
            session_id, lambda e: e.type == "tool.started" and e.data.get("tool") == tool
        )

        def logged() -> bool:
            return any(
                line.startswith(f"{tool} ") for line in read_lines(self.world_dir / "calls.log")
            )

        wait_until(logged, timeout, f"{tool}'s line in calls.log")

    def wait_settled(self, sub_ids: Sequence[str], timeout: float = 60.0) -> list[SubmissionRecord]:
        def settled() -> list[SubmissionRecord] | None:
            subs = self.read(lambda v: [v.get_submission(i) for i in sub_ids])
            if all(s is not None and s.status in SETTLED for s in subs):
                return subs
            return None

        try:
            return wait_until(settled, timeout, f"submissions {list(sub_ids)} to settle")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnostics()}") from None

    def wait_at_rest(self, session_id: str, timeout: float = 30.0) -> None:
        """Until the session's lease is let go and it owes no settlement webhook: a worker
        releases it in a write after the settling commit, so a submission can read settled
        while its session is still leased (or still owes its webhook's retry)."""

        def free() -> bool:
            session = self.read(lambda v: v.get_session(session_id))
            return session is not None and session.lease.owner is None and not session.webhooks

        wait_until(free, timeout, f"session {session_id} to let go of its lease, owing nothing")

    def world(self) -> World:
        return read_world(self.store_url, self.world_dir)

    def diagnostics(self) -> str:
        parts = []
        for worker in self.workers:
            parts.append(f"--- worker {worker.name} (pid {worker.pid}) ---\n{worker.log()[-6000:]}")
        return "\n".join(parts)

    def trace(self, session_id: str) -> str:
        code, out, err = self.run_cli("trace", session_id, "--store", self.store_url)
        assert code == 0, (code, out, err)
        return out


def parse_worker_pid(worker_field: object) -> int:
    """``attempt.started``'s ``worker`` is ``host:pid``."""
    return int(str(worker_field).rsplit(":", 1)[1])


def print_measure(label: str, seconds: float) -> None:
    """Measured figures go to stdout (``pytest -s`` or ``-rP`` shows them)."""
    print(f"MEASURE {label}: {seconds:.3f}s", flush=True)
