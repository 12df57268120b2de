"""The consuming side of an SQS wake queue: receive, keep invisible, delete.

:class:`~fxdurable.queues.sqs.SqsQueue` sends wakes; :class:`SqsConsumer` is what the SQS
worker (:mod:`fxdurable.workers.sqs_worker`) reads them with. It has a boto3 client of its
own, because a long poll holds a request open for up to 20 s, past the sending client's read
timeout. botocore's errors are translated as the sending side translates them: a missing
queue or refused access is a :class:`~fxdurable.errors.ConfigurationError`, an unreachable,
throttled or failing SQS a :class:`~fxdurable.errors.QueueUnavailableError`, any other refusal a
:class:`~fxdurable.errors.QueueError`; a receipt that lapsed is an answer (False), not an
error. Messages name the queue, never a credential.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore import exceptions as bx
from botocore.config import Config

from fxdurable.errors import ConfigurationError

# One translation of botocore's errors for both sides of the queue (STYLE: vendor errors are
# mapped at the adapter boundary, in one context manager).
from fxdurable.queues.sqs import DENIED_CODES, SqsQueue, sqs_errors

__all__ = ["MAX_BATCH", "MAX_WAIT_S", "SqsConsumer", "SqsMessage"]

MAX_BATCH = 10  # SQS's MaxNumberOfMessages
MAX_WAIT_S = 20  # SQS's WaitTimeSeconds
# A message may be kept invisible for at most 12 hours from its receipt (SQS's limit).
MAX_VISIBILITY_S = 12 * 3600

# A receipt handle that no longer counts: the message was deleted, or its visibility lapsed
# and it was (or will be) delivered again. Deleting or extending it is then moot.
GONE = {"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SqsMessage:
    message_id: str
    body: str
    receipt_handle: str
    receive_count: int  # ApproximateReceiveCount: 1 on the first delivery


class SqsConsumer:
    """Receives, extends and deletes the messages of ``queue`` (its URL, region, endpoint and
    credentials). ``wait_s`` is the long poll's wait (0 to 20 s)."""

    def __init__(self, queue: SqsQueue, *, wait_s: int, session: Any = None) -> None:
        import boto3

        if not 0 <= wait_s <= MAX_WAIT_S:
            raise ConfigurationError(f"the SQS long poll waits 0 to {MAX_WAIT_S}s, not {wait_s}")
        self._queue = queue
        self.wait_s = wait_s
        settings = queue.settings
        try:
            self._client: Any = (session or boto3).client(
                "sqs",
                region_name=settings.region,
                endpoint_url=settings.endpoint_url,
                config=Config(
                    connect_timeout=5,
                    read_timeout=wait_s + 10,  # the poll itself, then a normal answer's time
                    retries={"max_attempts": settings.max_attempts, "mode": "standard"},
                ),
            )
        except Exception as exc:  # botocore's NoRegionError and friends
            raise ConfigurationError(f"cannot open the SQS queue {queue.url}: {exc}") from None

    @property
    def where(self) -> str:
        return self._queue.settings.queue_url or self._queue.settings.name

    def redrive_max_receives(self) -> int | None:
        """The queue's ``maxReceiveCount`` when it has a dead-letter queue, else None. Also
        checks at startup that the queue exists and may be read."""
        url = self._url()
        with self._mapped("GetQueueAttributes"):
            answer = self._client.get_queue_attributes(
                QueueUrl=url, AttributeNames=["RedrivePolicy"]
            )
        policy = answer.get("Attributes", {}).get("RedrivePolicy")
        if not policy:
            return None
        try:
            return int(json.loads(policy)["maxReceiveCount"])
        except (ValueError, KeyError, TypeError):
            return None

    def receive(self, max_messages: int, *, visibility_s: int) -> list[SqsMessage]:
        """Long-poll for up to ``max_messages`` messages, each invisible to other consumers for
        ``visibility_s`` from now."""
        url = self._url()
        with self._mapped("ReceiveMessage"):
            answer = self._client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=max(1, min(max_messages, MAX_BATCH)),
                WaitTimeSeconds=self.wait_s,
                VisibilityTimeout=min(visibility_s, MAX_VISIBILITY_S),
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        return [
            SqsMessage(
                message_id=str(m.get("MessageId", "")),
                body=str(m.get("Body", "")),
                receipt_handle=str(m["ReceiptHandle"]),
                receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
            )
            for m in answer.get("Messages", [])
        ]

    def extend(self, message: SqsMessage, visibility_s: int) -> bool:
        """Keep ``message`` invisible for ``visibility_s`` more seconds (0: visible at once).
        False when its receipt no longer counts (deleted, or delivered again)."""
        return self._on_receipt(
            "ChangeMessageVisibility",
            self._client.change_message_visibility,
            message,
            VisibilityTimeout=max(0, min(visibility_s, MAX_VISIBILITY_S)),
        )

    def delete(self, message: SqsMessage) -> bool:
        """Delete ``message``. False when its receipt no longer counts: SQS delivered it again
        after its visibility lapsed, and that delivery decides (the store says what is done)."""
        return self._on_receipt("DeleteMessage", self._client.delete_message, message)

    def close(self) -> None:
        self._client.close()

    def _on_receipt(self, action: str, call: Any, message: SqsMessage, **params: Any) -> bool:
        url = self._url()
        try:
            with self._mapped(action):
                call(QueueUrl=url, ReceiptHandle=message.receipt_handle, **params)
        except _ReceiptGone:
            return False
        return True

    def _url(self) -> str:
        with self._mapped("GetQueueUrl"):
            return self._queue.queue_url()

    def _mapped(self, action: str) -> contextlib.AbstractContextManager[None]:
        return _consumer_errors(self.where, action)


class _ReceiptGone(Exception):
    """A receipt handle SQS no longer honours (internal: :meth:`SqsConsumer._on_receipt`)."""


@contextlib.contextmanager
def _consumer_errors(where: str, action: str) -> Iterator[None]:
    """The sending side's translation (:mod:`fxdurable.queues.sqs`), plus what only a consumer
    meets: a lapsed receipt, and refused access naming a consumer's permissions."""
    with sqs_errors(where):
        try:
            yield
        except bx.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in GONE and action in ("DeleteMessage", "ChangeMessageVisibility"):
                raise _ReceiptGone from None
            if code in DENIED_CODES:
                raise ConfigurationError(
                    f"access to the SQS queue {where} was refused ({code}) for {action}; a "
                    "worker needs sqs:ReceiveMessage, sqs:DeleteMessage, "
                    "sqs:ChangeMessageVisibility, sqs:GetQueueAttributes, sqs:GetQueueUrl and "
                    "sqs:SendMessage on it"
                ) from None
            raise
