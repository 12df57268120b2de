"""A warm stop that reaches an idle worker is never lost (issue 9, found by the §7 loop).

RQ stops an idle worker by raising ``StopRequested`` from its SIGTERM handler. When the signal
lands inside a logging call, logging swallows the exception and only the worker's flag is left;
RQ 3's dequeue loop retries each dequeue timeout without looking at that flag, so the worker
listened on until it was killed. A real ``FxdWorker`` on the test Redis, with the swallowed
stop arriving during its first (empty) dequeue.
"""

from __future__ import annotations

from typing import Any

import pytest
from rq.exceptions import DequeueTimeout

from fxdurable.workers.rq_worker_class import FxdWorker

pytestmark = [pytest.mark.redis]


@pytest.fixture
def queue(rq_test_queue: Any) -> Any:
    return rq_test_queue


def test_a_stop_swallowed_during_an_idle_dequeue_ends_the_worker(
    queue: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = FxdWorker([queue], connection=queue.connection)
    dequeues = 0

    def dequeue_any(*args: Any, **kwargs: Any) -> None:
        nonlocal dequeues
        dequeues += 1
        if dequeues > 3:  # without the fix the worker would listen on for ever
            pytest.fail("the worker kept dequeueing after a stop was requested")
        worker._stop_requested = True  # what is left of a StopRequested logging swallowed
        raise DequeueTimeout(1, queue.key)

    monkeypatch.setattr(worker.queue_class, "dequeue_any", staticmethod(dequeue_any))
    worker.work(burst=False, with_scheduler=False)
    assert dequeues == 1


def test_a_busy_worker_with_a_stop_requested_keeps_beating(queue: Any) -> None:
    """The monitor of a running horse beats while busy: a warm stop waits for the horse."""
    worker = FxdWorker([queue], connection=queue.connection)
    worker.set_state("busy")
    worker._stop_requested = True
    worker.heartbeat()  # no StopRequested
