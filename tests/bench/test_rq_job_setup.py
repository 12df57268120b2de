"""What an RQ job sets up, counted (never timed): ``fxdurable worker`` opens and checks the
store once per worker, not once per job, and a work horse makes only what cannot cross a fork.

Each case runs ``python -m bench.rq_job_phases --json`` (the worker in that process, its own
``redis-server``, five one-turn sessions of the bench agent) and reads what the worker process
and its horses counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.redis_server import unavailable_reason
from tests.redis_support import unavailable

REPO = Path(__file__).resolve().parents[2]
JOBS = 5


@pytest.fixture(autouse=True)
def _redis_server() -> None:
    """Skipped without redis-server, except in CI, where that fails (tests/redis_support.py)."""
    reason = unavailable_reason()
    if reason is not None:
        unavailable(reason, "the RQ job-setup counts")


def _counts(store: str, mode: str) -> dict[str, dict[str, int]]:
    command = [sys.executable, "-m", "bench.rq_job_phases", "--jobs", str(JOBS)]
    done = subprocess.run(
        [*command, "--store", store, "--mode", mode, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts: dict[str, dict[str, int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_forking_worker_checks_the_store_once_and_each_horse_makes_one_loop(store: str) -> None:
    counts = _counts(store, "fork")
    worker, horses = counts["worker"], counts["horses"]
    check = "schema check (SQLite)" if store == "sqlite" else "schema check (Redis)"
    assert horses["job function"] == horses["fork"] == JOBS
    # Checked once, for every horse, by the worker; its other check is the startup scan's.
    assert worker["store opened"] == 1
    assert worker[check] == 2
    assert check not in horses
    if store == "redis":  # the worker's store object itself, reused by every horse
        assert "store opened" not in horses
    else:  # its own connections in each horse (none may cross a fork), the schema not checked
        assert horses["store opened"] == JOBS
    # Made once in the worker and copied by each fork: the queue client. The agents are
    # loaded again in each horse (FXD_AGENTS may name a function, called once per process
    # that runs jobs), from the module the worker imported.
    assert "queue client opened" not in horses
    assert horses["agents loaded"] == JOBS
    # What cannot cross a fork: one event loop (and one wake handler) per horse, reused by
    # every step of its job.
    assert horses["event loop created"] == horses["wake handler built"] == JOBS
    if store == "redis":  # the worker's store: its redis-py pool reconnects in each horse
        assert "SQLite connection opened" not in horses
        # ... and is left to the horse's exit: closing it waited out its pub/sub subscriber's
        # receive (up to half a second a job).
        assert "store closed (Redis)" not in horses
    else:
        # One pool thread, one connection per horse: the turn's calls are sequential (CPython's
        # pool started 3 threads a horse, each opening a connection).
        assert horses["SQLite connection opened"] == JOBS
        # The pool's thread and the lease guard's: none more for the close (CPython's pool
        # and asyncio's shutdown_default_executor started 4 a horse).
        assert horses["thread started"] == 2 * JOBS
        # The keeper holds the database open between horses: no horse's close is the last
        # one, which checkpointed the whole log and deleted it for the next horse to remake.
        assert "job: SQLite WAL deleted at its end" not in horses


def test_a_no_fork_worker_makes_its_context_once_for_every_job() -> None:
    counts = _counts("sqlite", "nofork")
    worker = counts["worker"]
    assert counts["horses"] == {}
    assert worker["job function"] == JOBS
    for piece in ("store opened", "event loop created", "agents loaded", "queue client opened"):
        assert worker[piece] == 1, piece
    assert worker["schema check (SQLite)"] == 2  # the startup scan's and the context's
