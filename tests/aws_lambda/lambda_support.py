"""What the Lambda tests share: a moto SQS queue and SQLite store of the test's own, Lambda's
event shapes (SQS records, API Gateway HTTP API v2 requests) and a context whose remaining
time runs down like Lambda's."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aws_support import REGION, aws_session
from dynamo_support import dynamo_url, offloaded_keys

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.records import SessionRecord
from fxdurable.queues.sqs import encode_wake
from tests.kit.story import AGENT

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
DUMMY_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


class FakeContext:
    """Lambda's context as the functions read it: the time left runs down from ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self._ends_at = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._ends_at - time.monotonic()) * 1000)


@dataclass
class LambdaWorld:
    """A queue on the moto server, a SQLite store and the story's outside world."""

    endpoint_url: str
    directory: Path
    queue_url: str
    sqs: Any
    store_url: str

    @classmethod
    def create(
        cls,
        endpoint_url: str,
        directory: Path,
        *,
        visibility_s: int = 30,
        store: str = "sqlite",
        table_endpoint_url: str | None = None,
    ) -> LambdaWorld:
        """``store``: ``sqlite`` (a file) or ``dynamodb`` (a table and a bucket on the moto
        server ``table_endpoint_url``, with records past 300 bytes offloaded to S3, so that the
        functions' S3 path runs too: the template's store offloads past its default threshold).
        The table needs the serial server: a turn and its heartbeat write at once, and the
        threaded one does not isolate transactions
        (tests/stores/test_moto_transaction_isolation.py); the queue stays on
        ``endpoint_url``, the threaded one (long polls)."""
        sqs = aws_session().client("sqs", endpoint_url=endpoint_url)
        name = f"fxd-lambda-{uuid.uuid4().hex[:12]}"
        queue_url = sqs.create_queue(
            QueueName=name, Attributes={"VisibilityTimeout": str(visibility_s)}
        )["QueueUrl"]
        (directory / "world").mkdir(parents=True, exist_ok=True)
        if store == "dynamodb":
            assert table_endpoint_url is not None, "a DynamoDB world needs the serial server"
            store_url = dynamo_url(table_endpoint_url, offload_threshold=300)
        else:
            store_url = f"sqlite:///{directory}/lambda.db"
        return cls(endpoint_url, directory, queue_url, sqs, store_url)

    @property
    def world_dir(self) -> Path:
        return self.directory / "world"

    def env(self) -> dict[str, str]:
        """What the template sets for the functions, pointed at moto and this test's files."""
        return {
            **DUMMY_AWS,
            "FXD_STORE": self.store_url,
            "FXD_QUEUE": f"sqs://{self.queue_url}?region={REGION}",
            "FXD_AGENTS": "lambda_agents:agents",
            "FXD_LAMBDA_MARGIN_S": "5",
            "FXD_TEST_WORLD": str(self.world_dir),
            "FXD_HTTP_TOKENS": ",".join(f"{who}={token}" for who, token in TOKENS.items()),
        }

    def subprocess_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "AWS_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), str(HERE)])
        env["PYTHONUNBUFFERED"] = "1"
        return {**env, **self.env(), **extra}

    # -- the queue --------------------------------------------------------------------------

    def receive(self, wait_s: int = 0) -> list[dict[str, Any]]:
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=wait_s,
            AttributeNames=["All"],
        )
        return list(answer.get("Messages", []))

    def delete(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def send(self, body: str) -> None:
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)

    def admit(self, session_key: str, prompt: str, request_id: str, *, agent: str = AGENT) -> str:
        """Admit ``prompt`` and send its wake, as the HTTP function does; its submission id."""
        store = open_store(self.store_url)
        try:
            journal = Journal(store, SystemClock(), RandomIds())
            admission = journal.admit(
                session_key, agent=agent, prompt=prompt, request_id=request_id
            )
        finally:
            store.close()
        self.send(encode_wake(session_key, "submitted", None))
        return admission.submission.id

    # -- the store --------------------------------------------------------------------------

    def session(self, key: str) -> SessionRecord | None:
        store = open_store(self.store_url)
        try:
            return store.read(lambda v: v.get_session(key))
        finally:
            store.close()

    def offloaded(self) -> int:
        """How many objects the DynamoDB store put in its bucket (0 for SQLite)."""
        if "bucket=" not in self.store_url:
            return 0
        return len(offloaded_keys(self.store_url))

    def close(self) -> None:
        self.sqs.delete_queue(QueueUrl=self.queue_url)
        self.sqs.close()


def sqs_event(messages: list[dict[str, Any]], queue_arn: str = "arn:aws:sqs:us-east-1:1:q") -> dict:
    """The event Lambda's SQS poller hands the function for these received messages."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": m["Attributes"]["ApproximateReceiveCount"],
                    "SentTimestamp": m["Attributes"]["SentTimestamp"],
                },
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


def handled(messages: list[dict[str, Any]], answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages a function's answer leaves to be deleted (the poller deletes them)."""
    failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
    return [m for m in messages if m["MessageId"] not in failed]


def api_event(
    method: str,
    path: str,
    *,
    query: Mapping[str, str] | None = None,
    token: str | None = None,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    base64_body: bool = False,
) -> dict[str, Any]:
    """An API Gateway HTTP API request, payload format 2.0, as AWS documents it."""
    raw_query = urlencode(query or {})
    all_headers = {"host": "abc123.execute-api.us-east-1.amazonaws.com", "user-agent": "curl/8"}
    if token is not None:
        all_headers["authorization"] = f"Bearer {token}"
    text = None
    if body is not None:
        all_headers["content-type"] = "application/json"
        text = body if isinstance(body, str) else json.dumps(body)
    all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": raw_query,
        "headers": all_headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "abc123",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.10",
                "userAgent": "curl/8",
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Dec/2026:05:00:00 +0000",
            "timeEpoch": 1796014800000,
        },
        "isBase64Encoded": base64_body,
    }
    if raw_query:
        event["queryStringParameters"] = dict(parse_qsl(raw_query))
    if text is not None:
        event["body"] = base64.b64encode(text.encode()).decode() if base64_body else text
    return event


def answer_body(answer: Mapping[str, Any]) -> str:
    body = answer.get("body") or ""
    return base64.b64decode(body).decode() if answer.get("isBase64Encoded") else body


def answer_json(answer: Mapping[str, Any]) -> Any:
    return json.loads(answer_body(answer))


def answer_lines(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in answer_body(answer).splitlines() if line]
