"""What the bench's worker processes share (:mod:`bench.rq_throughput`,
:mod:`bench.pg_worker_set`): their environment and their stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.runtime_turns import SETTINGS

__all__ = ["start_worker", "stop_workers", "worker_env"]

REPO = Path(__file__).resolve().parents[1]


def worker_env(**extra: str) -> dict[str, str]:
    """This process's environment without its ``FXD_`` settings, the repository on
    ``PYTHONPATH`` (the bench's agents modules), unbuffered output, and lease timers far
    longer than a run (:data:`bench.runtime_turns.SETTINGS`: no heartbeat inside one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    env["FXD_LEASE_TTL_S"] = str(SETTINGS.lease_ttl_s)
    env["FXD_HEARTBEAT_S"] = str(SETTINGS.heartbeat_s)
    return env | extra


def stop_workers(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """Warm shutdown (SIGTERM), then SIGKILL of the process group of any worker still running
    after ``timeout``."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_worker(command: Sequence[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """One worker process in a session of its own (its group is what :func:`stop_workers`
    kills), in ``log``'s directory, its output (stdout and stderr) in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            cwd=log.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
