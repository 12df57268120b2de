"""The SQS queue: a wake is a small JSON message on an Amazon SQS queue.

``sqs://NAME?region=eu-west-1`` names a queue by name (resolved with one ``GetQueueUrl``, on
the first send); ``sqs://https://sqs.eu-west-1.amazonaws.com/123456789012/NAME`` gives its URL,
as is or percent-encoded. Options: ``region`` (else the queue URL's, else boto3's default),
``endpoint_url`` (moto, LocalStack; else a non-AWS queue URL's own origin) and
``max_attempts`` (3: botocore's standard retries of one send). Credentials come from boto3's
usual chain (environment, profile, instance or Lambda role), never from the URL. Needs
``pip install 'fxdurable[aws]'``; :mod:`fxdurable.backends` imports this module (and boto3)
only when an ``sqs://`` URL is opened.

A message body is a wake as :mod:`fxdurable.queues.wake_codec` encodes it (``decode_wake`` and
``encode_wake`` stay importable from here). A standard queue is the default: its duplicates
and reordering are harmless, because the store orders and deduplicates the work. A ``.fifo``
queue is accepted, with ``MessageGroupId`` = the session.

**Delayed wakes.** ``enqueue(..., delay_s=30)`` sets ``DelaySeconds`` (whole seconds, rounded
up, at most 900: SQS's limit, so longer asks are clamped to it), so a backoff can outlast the
invocation that chose it: the invocation commits, enqueues a delayed continuation and ends,
instead of sleeping on a billed Lambda. FIFO queues have no per-message delay; a delayed wake
on one is refused (:class:`~fxdurable.errors.ConfigurationError`), and ``delays_wakes`` is
False, so the runtime sends its continuations undelayed there. A delay past 900 s, or a wake
that comes early for any other reason, finds the backoff's end recorded on the turn and waits
out or defers the rest (``TurnRecord.model_retry_at``).

**Errors.** A missing queue, denied access, or no credentials or region: ConfigurationError.
An unreachable endpoint, a timeout, throttling or a failing service:
:class:`~fxdurable.errors.QueueUnavailableError`. Any other refusal (a session id SQS will not
take as a FIFO group id, past 128 characters): :class:`~fxdurable.errors.QueueError`. All name
the queue, never a credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import boto3
from botocore import exceptions as bx
from botocore.config import Config

from fxdurable.core import tracecontext
from fxdurable.errors import ConfigurationError, QueueError, QueueUnavailableError
from fxdurable.queues.wake_codec import decode_wake, encode_wake

__all__ = [
    "DENIED_CODES",
    "MAX_DELAY_S",
    "SqsQueue",
    "SqsSettings",
    "decode_wake",
    "encode_wake",
    "parse_sqs_url",
    "sqs_errors",
]

MAX_DELAY_S = 900
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
# SQS keeps a FIFO deduplication id for 5 minutes, even after the message was consumed. A
# bucket that wide would swallow a wake sent after the previous identical one was handled
# (the worker may have read the store before the new work landed), leaving that work to the
# scan. One second collapses a burst of identical wakes and botocore's retries of one send;
# a later wake always goes through. The store deduplicates the rest anyway.
FIFO_DEDUP_BUCKET_S = 1

_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")
_AWS_HOST = re.compile(r"sqs[.-]([a-z0-9-]+)\.amazonaws\.com(\.cn)?")
_MISSING = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
DENIED_CODES = {
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "KMS.AccessDeniedException",
}


@dataclass(frozen=True, slots=True)
class SqsSettings:
    name: str
    queue_url: str | None  # None: resolve ``name`` with GetQueueUrl
    region: str | None
    endpoint_url: str | None
    max_attempts: int = 3

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")


def parse_sqs_url(url: str) -> SqsSettings:
    if not url.startswith("sqs://"):
        raise ConfigurationError(f"not an SQS URL: {url!r} (expected sqs://QUEUE_URL_OR_NAME)")
    # A queue URL has no query of its own, so the last "?" starts ours.
    target, sep, query = url[len("sqs://") :].rpartition("?")
    if not sep:
        target, query = query, ""
    target = unquote(target)
    options = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    region = options.pop("region", "") or None
    endpoint_url = options.pop("endpoint_url", "") or None
    try:
        max_attempts = int(options.pop("max_attempts", "3"))
    except ValueError as exc:
        raise ConfigurationError(f"max_attempts must be a whole number in {url!r}") from exc
    if not 1 <= max_attempts <= 10:
        raise ConfigurationError(f"max_attempts must be 1 to 10 in {url!r}")
    if options:
        raise ConfigurationError(f"unknown SQS URL options {sorted(options)} in {url!r}")
    if endpoint_url is not None and urlparse(endpoint_url).scheme not in ("http", "https"):
        raise ConfigurationError(f"endpoint_url must be an http(s) URL in {url!r}")
    queue_url = None
    if target.startswith(("https://", "http://")):
        parsed = urlparse(target)
        parts = [p for p in parsed.path.split("/") if p]
        if not parsed.hostname or len(parts) != 2:
            raise ConfigurationError(
                f"not an SQS queue URL: {target!r} (expected https://HOST/ACCOUNT/NAME)"
            )
        queue_url, name = target, parts[1]
        aws = _AWS_HOST.fullmatch(parsed.hostname)
        if aws and region is None:
            region = aws.group(1)
        if not aws and endpoint_url is None:  # moto, LocalStack: the queue URL's own server
            endpoint_url = f"{parsed.scheme}://{parsed.netloc}"
    else:
        name = target
    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"not an SQS queue name: {name!r} in {url!r} (1-80 letters, digits, '-' or '_', "
            "optionally ending .fifo; or give the queue URL)"
        )
    return SqsSettings(name, queue_url, region, endpoint_url, max_attempts)


class SqsQueue:
    """Wakes on SQS. ``session`` is a ``boto3.Session`` to take credentials and the default
    region from (an assumed role, a profile); by default boto3's own."""

    def __init__(self, url: str, *, session: Any = None) -> None:
        self.url = url
        self.settings = parse_sqs_url(url)
        # A standard queue delays one message (DelaySeconds); a FIFO queue cannot.
        self.delays_wakes = not self.settings.fifo
        self._queue_url = self.settings.queue_url
        self._resolving = threading.Lock()
        try:
            self._client: Any = (session or boto3).client(
                "sqs",
                region_name=self.settings.region,
                endpoint_url=self.settings.endpoint_url,
                config=Config(
                    connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=READ_TIMEOUT_S,
                    retries={"max_attempts": self.settings.max_attempts, "mode": "standard"},
                ),
            )
        except Exception as exc:  # botocore's NoRegionError and friends
            raise ConfigurationError(f"cannot open the SQS queue {self._where}: {exc}") from None

    @property
    def _where(self) -> str:
        if self._queue_url:
            return self._queue_url
        return f"{self.settings.name!r} (region {self.settings.region or 'default'}" + (
            f", endpoint {self.settings.endpoint_url})" if self.settings.endpoint_url else ")"
        )

    def queue_url(self) -> str:
        """The queue's URL, resolved from its name with one ``GetQueueUrl`` the first time."""
        with self._resolving:
            if self._queue_url is None:
                with self._mapped():
                    answer = self._client.get_queue_url(QueueName=self.settings.name)
                self._queue_url = str(answer["QueueUrl"])
            return self._queue_url

    def send_now(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        """Synchronous enqueue (for callers outside an event loop)."""
        if delay_s < 0:
            raise ValueError(f"a wake's delay cannot be negative: {delay_s}")
        delay = math.ceil(min(delay_s, MAX_DELAY_S))
        if delay and self.settings.fifo:
            raise ConfigurationError(
                f"the FIFO queue {self._where} cannot delay one message (SQS allows a delay "
                "only per FIFO queue); use a standard queue for delayed wakes"
            )
        body = encode_wake(session_id, reason, tracecontext.current_traceparent())
        params: dict[str, Any] = {"QueueUrl": self.queue_url(), "MessageBody": body}
        if delay:
            params["DelaySeconds"] = delay
        if self.settings.fifo:
            bucket = int(time.time() // FIFO_DEDUP_BUCKET_S)
            key = f"{session_id}\0{reason}\0{bucket}".encode()
            params["MessageGroupId"] = session_id
            params["MessageDeduplicationId"] = hashlib.sha256(key).hexdigest()
        with self._mapped():
            self._client.send_message(**params)

    async def enqueue(self, session_id: str, *, reason: str, delay_s: float = 0) -> None:
        await asyncio.to_thread(self.send_now, session_id, reason=reason, delay_s=delay_s)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._client.close)

    def _mapped(self) -> contextlib.AbstractContextManager[None]:
        return sqs_errors(self._where)


@contextlib.contextmanager
def sqs_errors(where: str) -> Iterator[None]:
    """Translate botocore's errors into fxdurable's at the adapter boundary (httpx's habit)."""
    try:
        yield
    except QueueError:
        raise
    except Exception as exc:
        if isinstance(exc, bx.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise ConfigurationError(
                    f"the SQS queue {where} does not exist; create it or fix FXD_QUEUE"
                ) from None
            if code in DENIED_CODES:
                raise ConfigurationError(
                    f"access to the SQS queue {where} was refused ({code}); check the "
                    "credentials and that their policy allows sqs:SendMessage and "
                    "sqs:GetQueueUrl on it"
                ) from None
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            message = f"the SQS queue {where} refused the wake ({code or 'unknown error'})"
            if status >= 500 or status == 429 or "Throttl" in code or code == "RequestThrottled":
                raise QueueUnavailableError(message, url=where) from None
            raise QueueError(message) from None  # a request SQS will refuse again
        if isinstance(exc, (bx.NoCredentialsError, bx.NoRegionError, bx.PartialCredentialsError)):
            raise ConfigurationError(f"cannot use the SQS queue {where}: {exc}") from None
        if isinstance(exc, bx.BotoCoreError):  # connection refused, timeouts, DNS
            raise QueueUnavailableError(
                f"cannot reach the SQS queue {where}: {type(exc).__name__}; is the endpoint "
                "right and reachable?",
                url=where,
            ) from None
        raise
