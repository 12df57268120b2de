"""The SQS worker harness: real ``fxdurable worker --queue sqs://`` processes on a moto server.

:class:`SqsHarness` is a :class:`~worker_support.WorkerHarness` whose queue is an SQS queue of
its own on the test run's moto server (standard or ``.fifo``, with a dead-letter queue when
``max_receives`` is given). Its workers poll briefly (``FXD_SQS_WAIT_S=1``) and hide a message
for ``visibility_s`` (2 s), so a killed worker's message is delivered again within seconds.
Credentials are moto's dummies, given to each worker in its environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_support import REGION, aws_session
from worker_support import WorkerHarness

__all__ = ["AWS_ENV", "SqsHarness"]

# Dummy credentials for moto: set in every worker's environment (and, by the fixture, in the
# test process for its submitting Runtime), never real ones.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


class SqsHarness(WorkerHarness):
    """A worker harness on an SQS queue of its own on the moto server at ``endpoint_url``."""

    ready_mark = "listening on SQS queue"
    forks_horses = False

    def __init__(
        self,
        root: Path,
        *,
        store_url: str,
        endpoint_url: str,
        fifo: bool = False,
        max_receives: int | None = None,
        visibility_s: int = 2,
        job_timeout_s: float = 60.0,
        **timings: float,
    ) -> None:
        """``timings``: the lease and scan settings of :class:`WorkerHarness`."""
        super().__init__(root, store_url=store_url, **timings)
        self.visibility_s = visibility_s
        self.job_timeout_s = job_timeout_s
        self.sqs: Any = aws_session().client("sqs", endpoint_url=endpoint_url)
        suffix = ".fifo" if fifo else ""
        attributes: dict[str, str] = {"FifoQueue": "true"} if fifo else {}
        self.dlq_url: str | None = None
        if max_receives is not None:
            self.dlq_url = self._create(f"{self.queue_name}-dlq{suffix}", attributes)
            dlq_arn = self.sqs.get_queue_attributes(
                QueueUrl=self.dlq_url, AttributeNames=["QueueArn"]
            )["Attributes"]["QueueArn"]
            attributes = attributes | {
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receives)}
                )
            }
        self.sqs_url = self._create(f"{self.queue_name}{suffix}", attributes)

    def _create(self, name: str, attributes: dict[str, str]) -> str:
        return str(self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])

    @property
    def queue_url(self) -> str:
        return f"sqs://{self.sqs_url}?region={REGION}"

    def queue_env(self) -> dict[str, str]:
        return AWS_ENV | {
            "FXD_SQS_WAIT_S": "1",
            "FXD_SQS_VISIBILITY_S": str(self.visibility_s),
            "FXD_SQS_JOB_TIMEOUT_S": str(self.job_timeout_s),
        }

    def cleanup(self) -> None:
        super().cleanup()
        self.sqs.close()

    # -- the queue, as an operator sees it -------------------------------------------------

    def send_raw(self, body: str, **params: Any) -> None:
        self.sqs.send_message(QueueUrl=self.sqs_url, MessageBody=body, **params)

    def depth(self, url: str | None = None) -> int:
        """Messages visible or in flight on the queue (or on ``url``)."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=url or self.sqs_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )

    def bodies(self, url: str | None = None) -> list[str]:
        """The bodies of (up to 10) messages on the queue, or on ``url`` (the dead-letter
        queue's: :attr:`dlq_url`); read, and visible again at once."""
        answer = self.sqs.receive_message(
            QueueUrl=url or self.sqs_url, MaxNumberOfMessages=10, VisibilityTimeout=0
        )
        return [str(m["Body"]) for m in answer.get("Messages", [])]
