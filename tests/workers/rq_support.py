"""The RQ worker harness: real ``fxdurable worker`` processes against a real Redis.

Imported by ``conftest.py`` (which puts this directory on ``sys.path``) and the tests.
:class:`RqHarness` is a :class:`~worker_support.WorkerHarness` whose queue is an RQ queue of
its own on the test Redis; the process helpers of ``worker_support`` are re-exported here for
the RQ tests.
"""

from __future__ import annotations

from pathlib import Path

from worker_support import (
    WorkerHarness,
    WorkerProc,
    child_pids,
    freeze_outside_a_commit,
    parse_worker_pid,
    pid_alive,
    print_measure,
    proc_identity,
    proc_stat,
    proc_wchan,
    wait_until,
)

__all__ = [
    "HORSE_DIED",
    "RqHarness",
    "WorkerProc",
    "child_pids",
    "freeze_outside_a_commit",
    "parse_worker_pid",
    "pid_alive",
    "print_measure",
    "proc_identity",
    "proc_stat",
    "proc_wchan",
    "wait_until",
]

HORSE_DIED = "failed (Work-horse terminated unexpectedly; waitpid returned 9 (signal 9)"


class RqHarness(WorkerHarness):
    """A worker harness on an RQ queue of its own in database ``redis_db`` of the test Redis."""

    ready_mark = "*** Listening on"

    def __init__(
        self,
        root: Path,
        *,
        store_url: str,
        redis_port: int,
        redis_db: int,
        job_timeout: int = 60,
        **timings: float,
    ) -> None:
        """``timings``: the lease and scan settings of :class:`WorkerHarness`."""
        super().__init__(root, store_url=store_url, **timings)
        self.redis_port = redis_port
        self.redis_db = redis_db
        self.job_timeout = job_timeout

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/{self.redis_db}"

    @property
    def queue_url(self) -> str:
        return (
            f"rq://127.0.0.1:{self.redis_port}/{self.redis_db}"
            f"?queue={self.queue_name}&job_timeout={self.job_timeout}"
        )

    def worker_args(self, name: str) -> list[str]:
        return ["--name", name]
