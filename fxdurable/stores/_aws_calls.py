"""AWS requests of a store, counted, retried and mapped to fxdurable errors in one place.

Every request goes through :meth:`AwsCalls.call`, which counts it (``requests``), lets
botocore's standard retry mode retry throttling and 5xx a few times, then keeps retrying them
(and an unreachable endpoint) with capped exponential backoff and full jitter for
``retry_budget_s`` before raising :class:`~fxdurable.errors.StoreUnavailableError`. Nothing
raised here is a botocore exception: the table below is the one map from botocore's errors to
the store's (the DynamoDB store's requests, and the S3 requests of every store that offloads).
A store with codes of its own (DynamoDB's cancelled transactions, a missing table) hands
``special`` in; it is asked first.

Imports botocore: load this module only for a store that talks to AWS.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore import exceptions as bx
from botocore.config import Config

from fxdurable.errors import ConfigurationError, StoreError, StoreUnavailableError

__all__ = ["AwsCalls", "aws_client"]

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 2.0
_RETRYABLE = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionInProgressException",  # our own token still in flight: wait for it
    "SlowDown",  # S3
}
_DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "MissingAuthenticationTokenException",
}
_UNREACHABLE = (
    bx.EndpointConnectionError,
    bx.ConnectionClosedError,
    bx.ConnectTimeoutError,
    bx.ReadTimeoutError,
)

# (error code, response) -> the store's own error for it, or None for the common table's.
Special = Callable[[str, Mapping[str, Any]], BaseException | None]


def aws_client(
    maker: Any, service: str, *, region: str | None, endpoint_url: str | None, store: str
) -> Any:
    """A boto3 client of ``service`` with the stores' timeouts and retry mode; ``maker`` is
    a ``boto3.Session`` or the ``boto3`` module (credentials: its chain, never a URL)."""
    config = Config(
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={"mode": "standard", "max_attempts": 3},
    )
    try:
        return maker.client(service, region_name=region, endpoint_url=endpoint_url, config=config)
    except bx.NoRegionError:
        raise ConfigurationError(
            f"no AWS region for the {store}: add ?region=... to the URL or set AWS_REGION"
        ) from None


class AwsCalls:
    """The request loop of one store's AWS clients, shared by its threads.

    ``service`` and ``where`` name what the requests go to in messages ("DynamoDB",
    "table 'x' at http://..."); ``docs`` is the page that lists the IAM actions."""

    def __init__(
        self,
        *,
        service: str,
        where: str,
        retry_budget_s: float,
        docs: str,
        special: Special | None = None,
    ) -> None:
        self.service = service
        self.where = where
        self.retry_budget_s = retry_budget_s
        self._docs = docs
        self._special = special
        self._lock = threading.Lock()
        self.requests = 0  # requests sent (botocore's own retries not counted)

    def call(
        self, client: Any, operation: str, *, unknown_outcome: bool = False, **params: Any
    ) -> Any:
        """``client.<operation>(**params)``, counted, retried while the service is throttling
        or failing (bounded), mapped to fxdurable errors. ``unknown_outcome``: a write whose
        loss in transit leaves its outcome unknown (said in the error)."""
        budget = self.retry_budget_s
        deadline = time.monotonic() + budget
        failures = 0
        on = f"{self.service} {self.where}"
        while True:
            with self._lock:
                self.requests += 1
            try:
                return getattr(client, operation)(**params)
            except bx.ClientError as exc:
                error = exc.response.get("Error", {})
                code = str(error.get("Code", ""))
                own = self._special(code, exc.response) if self._special else None
                if own is not None:
                    raise own from None
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in _RETRYABLE or status >= 500:
                    cause: BaseException = exc
                else:
                    raise self._refused(operation, code, str(error.get("Message", exc))) from None
            except _UNREACHABLE as exc:
                cause = exc
            except bx.NoCredentialsError:
                raise ConfigurationError(
                    f"no AWS credentials for {on}: set them in the environment, a profile or "
                    "the instance/Lambda role"
                ) from None
            except bx.BotoCoreError as exc:
                raise StoreError(f"{operation} on {on} failed: {exc}") from None
            failures += 1
            delay = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**failures))
            if time.monotonic() + delay > deadline:
                what = (
                    "its outcome is unknown (it may have been applied): read the records again"
                    if unknown_outcome
                    else "nothing was written"
                )
                raise StoreUnavailableError(
                    f"{operation} on {on} kept failing for {budget:g} s ({cause}); {what}",
                    where=self.where,
                    cause=cause,
                ) from None
            time.sleep(delay)

    def _refused(self, operation: str, code: str, message: str) -> ConfigurationError | StoreError:
        on = f"{self.service} {self.where}"
        if code in _DENIED:
            return ConfigurationError(
                f"AWS refused {operation} on {on} ({code}): check the credentials and the IAM "
                f"policy ({self._docs} lists the actions)"
            )
        if code == "NoSuchBucket":
            return ConfigurationError(f"the S3 bucket of {on} does not exist: {message}")
        if code in ("NoSuchKey", "404"):
            return StoreError(
                f"{operation} on {on}: the S3 object is missing ({message}): removed by the "
                "bucket's lifecycle rule or by hand while a record still names it"
            )
        return StoreError(f"{operation} on {on} was refused ({code}): {message}")
