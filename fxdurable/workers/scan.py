"""One reconciliation scan from outside a worker: ``fxdurable scan`` and the RQ worker's.

Every session with unsettled work and no live owner gets a wake (sessions nobody holds only
after ``quiet_s`` without activity: their wake may still be queued). The queue is whatever
``wake`` sends to, so one scan serves RQ and SQS alike. ``fxdurable scan`` runs the
retention sweep (:func:`sweep_once`) after each scan.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.errors import QueueUnavailableError
from fxdurable.runtime.reconcile import orphaned_sessions
from fxdurable.runtime.retention import RetentionReport, sweep_retention

__all__ = ["scan_once", "scan_target", "sweep_once"]


def scan_once(store_url: str, wake: Callable[[str], None], *, quiet_s: float = 0.0) -> int:
    """Call ``wake(session_id)`` for every orphaned session; how many there were."""
    store = open_store(store_url)
    try:
        journal = Journal(store, SystemClock(), RandomIds())
        now = time.time()
        sessions = journal.read(lambda view: orphaned_sessions(view, now=now, quiet_s=quiet_s))
    finally:
        store.close()
    for session_id in sessions:
        wake(session_id)
    return len(sessions)


def sweep_once(store_url: str) -> RetentionReport:
    """One retention sweep (:mod:`fxdurable.runtime.retention`): erase every idle session
    past its retention. It needs the store only, no queue and no agents."""
    store = open_store(store_url)
    try:
        return sweep_retention(Journal(store, SystemClock(), RandomIds()))
    finally:
        store.close()


def scan_target(queue_url: str) -> tuple[Callable[[str], None], tuple[type[Exception], ...]]:
    """How a scan sends a wake to the queue at ``queue_url`` (``rq://``, ``sqs://`` or
    ``postgresql://``), and the errors that mean the queue is away (a repeating scan rides
    those out)."""
    if queue_url.startswith("sqs://"):
        from fxdurable.queues.sqs import SqsQueue

        sqs = SqsQueue(queue_url)
        return (lambda s: sqs.send_now(s, reason="reconcile")), (QueueUnavailableError,)
    if queue_url.startswith(("postgresql://", "postgres://")):
        from fxdurable.queues.postgres import PgQueue

        pg = PgQueue(queue_url)
        return (lambda s: pg.send_now(s, reason="reconcile")), (QueueUnavailableError,)
    from fxdurable.backends import open_rq_queue
    from fxdurable.workers.rq_worker_class import REDIS_DOWN

    rq = open_rq_queue(queue_url)
    rq.check()
    # enqueue_now raises QueueUnavailableError (fxdurable.queues.rq), the store's reads redis-py's
    return (lambda s: rq.enqueue_now(s, reason="reconcile")), (QueueUnavailableError, *REDIS_DOWN)
