"""``fxdurable worker --queue sqs://...``: the queue worker loop on an SQS queue.

The loop is :mod:`fxdurable.workers.queue_worker`'s; SQS fills its primitives with
:class:`~fxdurable.workers.sqs_consumer.SqsConsumer`: ``receive`` long-polls
(``ReceiveMessage``, up to ``FXD_SQS_WAIT_S`` seconds, at most 10 messages: SQS's limits, so
``--concurrency`` is 1 to 10), ``extend`` is ``ChangeMessageVisibility`` (to
``FXD_SQS_VISIBILITY_S`` every third of it while a wake runs), ``delete`` is
``DeleteMessage``. The dead-letter queue is the queue's redrive policy (its
``maxReceiveCount``); a queue without one deletes a body that is not a wake once logged, and
says so at startup. An idle worker stops within one long poll: SQS has no call that ends one.

Environment: ``FXD_STORE``, ``FXD_QUEUE``, ``FXD_AGENTS`` (or ``--store``/``--queue``/
``--agents``), the lease settings of :class:`~fxdurable.runtime.worker.WorkerSettings`
(``FXD_LEASE_TTL_S``, ``FXD_HEARTBEAT_S``, ``FXD_SCAN_QUIET_S``), and ``FXD_SQS_WAIT_S`` (20),
``FXD_SQS_VISIBILITY_S`` (30), ``FXD_SQS_JOB_TIMEOUT_S`` (900). AWS credentials and region
come from boto3's usual chain.
"""

from __future__ import annotations

import logging

from fxdurable.queues.sqs import SqsQueue
from fxdurable.workers.queue_settings import QueueLimits, QueueWorkerSettings
from fxdurable.workers.queue_worker import QueueBackend
from fxdurable.workers.sqs_consumer import MAX_BATCH, MAX_WAIT_S, SqsConsumer

__all__ = ["SQS"]


def _open(queue: SqsQueue, settings: QueueWorkerSettings) -> SqsConsumer:
    return SqsConsumer(queue, wait_s=settings.wait_s)


def _quiet_aws_logging() -> None:
    """botocore logs every request at DEBUG, signed headers included: keep it out of a ``-v``
    worker's log (no credentials in logs)."""
    for name in ("botocore", "boto3", "urllib3", "s3transfer"):
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))


# What ``fxdurable worker --queue sqs://`` runs: run_queue_worker(config, SQS, ...).
SQS = QueueBackend(
    name="SQS",
    logger="fxdurable.sqs",
    scheme="sqs://",
    limits=QueueLimits(prefix="FXD_SQS_", max_wait_s=MAX_WAIT_S, max_concurrency=MAX_BATCH),
    queue_type=SqsQueue,
    open_consumer=_open,
    prepare=_quiet_aws_logging,
)
