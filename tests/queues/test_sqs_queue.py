"""The SQS wake queue against a moto server (a real HTTP endpoint), and its URL and body
formats offline."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aws_support import REGION, aws_environment, aws_session

from fxdurable.backends import open_queue
from fxdurable.core import tracecontext
from fxdurable.errors import ConfigurationError, QueueError, QueueUnavailableError
from fxdurable.queues.sqs import SqsQueue, decode_wake, encode_wake, parse_sqs_url
from fxdurable.testing.net import free_port

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
AWS_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/wakes"


# -- URLs and bodies, offline ---------------------------------------------------------------


def test_a_bare_name_is_resolved_later_and_a_fifo_name_is_fifo() -> None:
    settings = parse_sqs_url("sqs://wakes.fifo?region=eu-west-1&endpoint_url=http://h:1")
    assert (settings.name, settings.queue_url, settings.region) == ("wakes.fifo", None, "eu-west-1")
    assert settings.endpoint_url == "http://h:1" and settings.fifo
    assert not parse_sqs_url("sqs://wakes").fifo


@pytest.mark.parametrize(
    "given", [AWS_URL, "https%3A%2F%2Fsqs.eu-west-1.amazonaws.com%2F123456789012%2Fwakes"]
)
def test_a_queue_url_as_is_or_percent_encoded_names_its_region(given: str) -> None:
    settings = parse_sqs_url(f"sqs://{given}")
    assert (settings.queue_url, settings.name, settings.region) == (AWS_URL, "wakes", "eu-west-1")
    assert settings.endpoint_url is None


def test_a_queue_url_off_aws_is_its_own_endpoint() -> None:
    settings = parse_sqs_url("sqs://http://127.0.0.1:5000/123456789012/q?region=us-east-1")
    assert settings.endpoint_url == "http://127.0.0.1:5000"
    assert settings.queue_url == "http://127.0.0.1:5000/123456789012/q"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqs://", "not an SQS queue name"),
        ("sqs://two words", "not an SQS queue name"),
        ("sqs://q?colour=red", r"unknown SQS URL options \['colour'\]"),
        ("sqs://q?max_attempts=many", "max_attempts must be a whole number"),
        ("sqs://q?max_attempts=0", "max_attempts must be 1 to 10"),
        ("sqs://q?endpoint_url=ftp://h", "endpoint_url must be an http"),
        ("sqs://https://sqs.amazonaws.com/only-account", "not an SQS queue URL"),
        ("rq://q", "not an SQS URL"),
    ],
)
def test_a_bad_url_is_refused_with_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        parse_sqs_url(url)


@pytest.mark.parametrize("trace_parent", [None, TRACE])
def test_a_wake_body_round_trips(trace_parent: str | None) -> None:
    body = encode_wake("alice/ops-1", "submitted", trace_parent)
    assert decode_wake(body) == ("alice/ops-1", "submitted", trace_parent)
    assert decode_wake(body.encode()) == ("alice/ops-1", "submitted", trace_parent)
    assert ("traceparent" in json.loads(body)) is (trace_parent is not None)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("not json", "not JSON"),
        ('["s", "r"]', "not a version-1 wake"),
        ('{"session": "s", "reason": "r"}', "not a version-1 wake"),
        ('{"v": 1, "reason": "r"}', "without a session id"),
        ('{"v": 1, "session": "", "reason": "r"}', "without a session id"),
        ('{"v": 1, "session": "s", "reason": "r", "traceparent": 7}', "traceparent is not"),
    ],
)
def test_a_body_that_is_not_a_wake_is_a_queue_error(body: str, says: str) -> None:
    with pytest.raises(QueueError, match=says):
        decode_wake(body)


# -- against moto --------------------------------------------------------------------------


@pytest.fixture
def sqs(moto_server: str) -> Iterator[Any]:
    client = aws_session().client("sqs", endpoint_url=moto_server)
    yield client
    client.close()


def make_queue(sqs: Any, *, fifo: bool = False) -> tuple[str, str]:
    name = f"wakes-{uuid.uuid4().hex[:10]}" + (".fifo" if fifo else "")
    attributes = {"FifoQueue": "true"} if fifo else {}
    return name, sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def receive(sqs: Any, queue_url: str, *, wait_s: int = 0) -> list[dict[str, Any]]:
    answer = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=wait_s,
        MessageSystemAttributeNames=["All"],
    )
    messages: list[dict[str, Any]] = answer.get("Messages", [])
    return messages


def send(queue: SqsQueue, session_id: str, *, reason: str, delay_s: float = 0) -> None:
    async def go() -> None:
        try:
            await queue.enqueue(session_id, reason=reason, delay_s=delay_s)
        finally:
            await queue.aclose()

    asyncio.run(go())


def by_name(moto_server: str, name: str, extra: str = "") -> SqsQueue:
    return SqsQueue(
        f"sqs://{name}?region={REGION}&endpoint_url={moto_server}{extra}", session=aws_session()
    )


def test_a_wake_on_a_standard_queue_named_by_name(moto_server: str, sqs: Any) -> None:
    name, queue_url = make_queue(sqs)
    queue = by_name(moto_server, name)
    assert queue.queue_url() == queue_url

    async def go() -> None:
        with tracecontext.handling_wake(TRACE):
            await queue.enqueue("alice/s1", reason="submitted")
        await queue.enqueue("alice/s1", reason="steer")
        await queue.aclose()

    asyncio.run(go())
    wakes = sorted(decode_wake(m["Body"]) for m in receive(sqs, queue_url))
    assert wakes == [("alice/s1", "steer", None), ("alice/s1", "submitted", TRACE)]


def test_a_fifo_wake_is_grouped_by_session(moto_server: str, sqs: Any) -> None:
    _, queue_url = make_queue(sqs, fifo=True)
    send(SqsQueue(f"sqs://{queue_url}", session=aws_session()), "bob/s2", reason="submitted")
    [message] = receive(sqs, queue_url)
    assert decode_wake(message["Body"]) == ("bob/s2", "submitted", None)
    assert message["Attributes"]["MessageGroupId"] == "bob/s2"
    assert len(message["Attributes"]["MessageDeduplicationId"]) == 64


def test_a_fifo_queue_refuses_a_delayed_wake(moto_server: str, sqs: Any) -> None:
    name, _ = make_queue(sqs, fifo=True)
    with pytest.raises(ConfigurationError, match="cannot delay one message"):
        send(by_name(moto_server, name), "s", reason="backoff", delay_s=5)


def test_a_delayed_wake_is_invisible_until_its_delay(moto_server: str, sqs: Any) -> None:
    name, queue_url = make_queue(sqs)
    send(by_name(moto_server, name), "s3", reason="backoff", delay_s=0.2)  # rounded up to 1 s
    assert receive(sqs, queue_url) == []
    [message] = receive(sqs, queue_url, wait_s=3)
    assert decode_wake(message["Body"]) == ("s3", "backoff", None)


def test_a_delay_past_the_sqs_limit_is_clamped_and_a_negative_one_refused(
    moto_server: str, sqs: Any
) -> None:
    name, queue_url = make_queue(sqs)
    send(by_name(moto_server, name), "s4", reason="backoff", delay_s=3600)  # sent as 900
    assert receive(sqs, queue_url) == []
    send(by_name(moto_server, name), "s4", reason="backoff", delay_s=float("inf"))
    with pytest.raises(ValueError, match="cannot be negative"):
        send(by_name(moto_server, name), "s4", reason="backoff", delay_s=-1)


def test_a_missing_queue_is_a_configuration_error_naming_it(moto_server: str) -> None:
    with pytest.raises(ConfigurationError, match=r"'no-such-queue' .*does not exist"):
        send(by_name(moto_server, "no-such-queue"), "s", reason="submitted")
    missing_url = f"{moto_server}/123456789012/no-such-queue"
    with pytest.raises(ConfigurationError, match=f"{missing_url} does not exist"):
        send(SqsQueue(f"sqs://{missing_url}", session=aws_session()), "s", reason="x")


def test_an_unreachable_endpoint_is_unavailable_and_names_no_secret() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    queue = SqsQueue(f"sqs://{endpoint}/123456789012/q?max_attempts=1", session=aws_session())
    with pytest.raises(QueueUnavailableError, match="cannot reach the SQS queue") as caught:
        send(queue, "s", reason="submitted")
    assert caught.value.url == f"{endpoint}/123456789012/q"
    assert "testing" not in str(caught.value)


def test_open_queue_opens_an_sqs_url(
    moto_server: str, sqs: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # A URL carries no credentials, so this path takes them from boto3's chain: the dummies
    # here, and no profile of the machine's.
    for var, value in aws_environment(tmp_path).items():
        monkeypatch.setenv(var, value)
    name, queue_url = make_queue(sqs)
    queue = open_queue(f"sqs://{name}?region={REGION}&endpoint_url={moto_server}")
    assert isinstance(queue, SqsQueue)
    send(queue, "carol/s5", reason="submitted")
    [message] = receive(sqs, queue_url)
    assert decode_wake(message["Body"]) == ("carol/s5", "submitted", None)
