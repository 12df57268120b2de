"""``fxdurable worker --queue postgresql://...``: the queue worker loop on the Postgres queue.

The loop is :mod:`fxdurable.workers.queue_worker`'s (concurrency, the visibility lease's
heartbeat, retry with backoff, graceful SIGTERM, the reconciliation scan); the Postgres queue
fills its primitives (:class:`~fxdurable.queues.postgres.PgConsumer`): ``receive`` claims due
wakes with ``FOR UPDATE SKIP LOCKED`` and otherwise blocks on ``LISTEN`` until a NOTIFY, the
next delayed wake, or the safety poll (``FXD_PG_WAIT_S``, 20 s); a stop signal ends that wait
at once (``interrupt``). ``FXD_PG_VISIBILITY_S`` (30) is the lease on a claimed wake: a
SIGKILLed worker's wake is delivered again once it lapses; ``FXD_PG_JOB_TIMEOUT_S`` (900)
bounds one wake. Nothing of boto3 is imported.

The Postgres worker first read the SQS worker's ``FXD_SQS_WAIT_S``, ``FXD_SQS_VISIBILITY_S``
and ``FXD_SQS_JOB_TIMEOUT_S``; each is still read when its ``FXD_PG_`` name is unset, with a
warning at every start naming the new one (ignored, with a warning, when both are set).

A lost database connection is ridden out like an SQS outage: the receive is retried with
backoff (1 s doubling to 30 s), reconnecting and LISTENing again; a claimed wake whose
delete failed is delivered again and finds its session at rest.
"""

from __future__ import annotations

from fxdurable.queues.postgres import PgConsumer, PgQueue
from fxdurable.workers.queue_settings import QueueLimits, QueueWorkerSettings
from fxdurable.workers.queue_worker import QueueBackend

__all__ = ["POSTGRES"]

# The safety poll only bounds how late a wake whose NOTIFY a reconnect lost can be; a stop
# interrupts the wait, so a long one costs nothing else. Concurrency keeps the bound the loop
# is tested at (SQS's batch of 10); it is no limit of Postgres.
MAX_WAIT_S = 3600
MAX_CONCURRENCY = 10


def _open(queue: PgQueue, settings: QueueWorkerSettings) -> PgConsumer:
    return PgConsumer(queue, wait_s=settings.wait_s)


# What ``fxdurable worker --queue postgresql://`` runs: run_queue_worker(config, POSTGRES, ...).
POSTGRES = QueueBackend(
    name="Postgres",
    logger="fxdurable.pgqueue",
    scheme="postgresql://",
    limits=QueueLimits(
        prefix="FXD_PG_",
        max_wait_s=MAX_WAIT_S,
        max_concurrency=MAX_CONCURRENCY,
        legacy_prefix="FXD_SQS_",
    ),
    queue_type=PgQueue,
    open_consumer=_open,
    interrupt=PgConsumer.interrupt,
)
