"""``fxdurable worker --queue postgresql://...``: the queue worker loop on the Postgres queue.

The loop is :class:`~fxdurable.workers.sqs_worker.SqsWorker`'s (concurrency, the visibility
lease's heartbeat, retry with backoff, graceful SIGTERM, the reconciliation scan); the
Postgres queue fills its primitives (:class:`~fxdurable.queues.postgres.PgConsumer`):
``receive`` claims due wakes with ``FOR UPDATE SKIP LOCKED`` and otherwise blocks on
``LISTEN`` until a NOTIFY, the next delayed wake, or the safety poll (``FXD_SQS_WAIT_S``,
20 s). ``FXD_SQS_VISIBILITY_S`` (30) is the lease on a claimed wake: a SIGKILLed worker's
wake is delivered again once it lapses; ``FXD_SQS_JOB_TIMEOUT_S`` (900) bounds one wake.

A lost database connection is ridden out like an SQS outage: the receive is retried with
backoff (1 s doubling to 30 s), reconnecting and LISTENing again; a claimed wake whose
delete failed is delivered again and finds its session at rest.
"""

from __future__ import annotations

import logging

from fxdurable.errors import ConfigurationError
from fxdurable.queues.postgres import PgConsumer, PgQueue
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.workers.config import WorkerConfig
from fxdurable.workers.sqs_settings import SqsWorkerSettings
from fxdurable.workers.sqs_worker import SqsWorker
from fxdurable.workers.warm import WarmContext

__all__ = ["run_pg_worker"]

log = logging.getLogger("fxdurable.pgqueue")


def run_pg_worker(
    config: WorkerConfig,
    *,
    burst: bool = False,
    scan_interval_s: float = 5.0,
    concurrency: int = 1,
) -> int:
    """Run until stopped (or, with ``burst``, until no wake is due). Returns an exit code."""
    settings = SqsWorkerSettings.from_env(concurrency=concurrency)
    if scan_interval_s < 0:
        raise ConfigurationError("--scan-interval must be 0 (off) or a number of seconds")
    context = WarmContext(config)
    consumer: PgConsumer | None = None
    try:
        queue = context.queue
        if not isinstance(queue, PgQueue):
            raise ConfigurationError(f"a Postgres worker needs a postgresql:// queue: {queue}")
        consumer = PgConsumer(queue, wait_s=settings.wait_s)
        announce_model_endpoints(context.agents.values(), process="fxdurable worker (Postgres)")
        worker = SqsWorker(
            context,
            queue,
            consumer,
            settings,
            max_receives=consumer.redrive_max_receives(),
            burst=burst,
            scan_interval_s=scan_interval_s,
            backend="Postgres",
            interrupt=consumer.interrupt,
        )
        return context.run(worker.serve())
    finally:
        if consumer is not None:
            consumer.close()
        context.close()
