"""The deployment page's three Redis commands: the demo story submitted to Redis + RQ and run
by a worker, with a crash in the worker and recovery by the next one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.crash]


def _env(store: str, queue: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FXD_CRASH_AT", "NO_COLOR")}
    env |= {
        "FXD_STORE": store,
        "FXD_QUEUE": queue,
        "FXD_AGENTS": "fxdurable.cli.demo_agent:agents",
        "FXD_LEASE_TTL_S": "5",
        "FXD_HEARTBEAT_S": "1",
    }
    return env | extra


def _worker(cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fxdurable", "worker", "--scan-interval", "0.5"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _stop(worker: subprocess.Popen[str]) -> str:
    if worker.poll() is None:
        worker.terminate()
    out, _ = worker.communicate(timeout=30)
    return out


def test_demo_story_on_redis_and_rq_survives_a_worker_crash(redis_url: str, tmp_path: Path) -> None:
    base = redis_url.split("?", 1)[0]
    queue = f"rq://{base.removeprefix('redis://')}?queue=q{uuid.uuid4().hex[:8]}&job_timeout=60"
    env = _env(redis_url, queue)
    crashing = _worker(tmp_path, env | {"FXD_CRASH_AT": "tool.after-execute:deploy"})
    demo = subprocess.Popen(
        [sys.executable, "-m", "fxdurable", "demo", "--store", redis_url, "--queue", queue],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = tmp_path / ".fxd-demo" / "deployments.log"
    deadline = time.monotonic() + 30
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.exists(), "the crashing worker never deployed"
    time.sleep(0.5)
    crashed_out = _stop(crashing)
    assert "crash injected at tool.after-execute:deploy" in crashed_out, crashed_out
    started = time.monotonic()
    healthy = _worker(tmp_path, env)
    try:
        out, _ = demo.communicate(timeout=60)
    finally:
        worker_out = _stop(healthy)
    recovery_s = time.monotonic() - started
    assert demo.returncode == 0, out + worker_out
    assert "Outcome unknown" in out and "NOT be replayed" in out, out
    assert len(log.read_text().splitlines()) == 1, "the unsafe deploy ran twice"
    check = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--store", redis_url, "--at-rest"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert recovery_s < 30, f"recovery took {recovery_s:.1f}s"
