"""The work horse never outlives its worker's watch (issue 9): when anything ends RQ's monitor of
a running horse without reaping it, ``FxdWorker`` asks the horse to stop at its next step
boundary (SIGUSR1) and kills it after a grace, before the error goes on.

A real RQ job forked by a real ``FxdWorker`` in this process, on the test Redis; the monitor is
ended by a subclass whose ``monitor_work_horse`` fails once the horse runs (what a connection
error there did before the worker rode those out).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from rq_support import pid_alive, wait_until

from fxdurable.workers import rq_worker_class
from fxdurable.workers.rq_worker_class import FxdWorker

pytestmark = [pytest.mark.redis]


class MonitorFailed(RuntimeError):
    pass


class BlindWorker(FxdWorker):
    """Stops watching its horse as soon as it has forked it."""

    horse_seen = 0

    def monitor_work_horse(self, job: Any, queue: Any, execution: Any) -> None:
        type(self).horse_seen = self.horse_pid
        wait_until(lambda: pid_alive(self.horse_pid), 10, "the horse to run")
        raise MonitorFailed("the monitor stopped watching")


@pytest.fixture
def queue(rq_test_queue: Any) -> Any:
    return rq_test_queue


def test_a_horse_the_worker_stops_watching_is_stopped_then_killed(
    queue: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The horse runs a job that ignores the stop request (SIGUSR1 only sets a flag in a
    horse), so after the grace it is killed: gone and reaped when the error propagates."""
    monkeypatch.setattr(rq_worker_class, "HORSE_STOP_GRACE_S", 0.5)
    job = queue.enqueue("time.sleep", 60)
    worker = BlindWorker([queue], connection=queue.connection)
    try:
        with pytest.raises(MonitorFailed):
            worker.execute_job(job, queue)
        horse = BlindWorker.horse_seen
        assert horse and horse != os.getpid()
        assert not pid_alive(horse)
        with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
            os.waitpid(horse, os.WNOHANG)
        assert worker.horse_pid == 0
    finally:
        if BlindWorker.horse_seen and pid_alive(BlindWorker.horse_seen):
            os.kill(BlindWorker.horse_seen, signal.SIGKILL)
            os.waitpid(BlindWorker.horse_seen, 0)
