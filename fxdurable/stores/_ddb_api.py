"""The DynamoDB store's requests: one place that calls boto3, counts, retries and maps errors.

Every request goes through :meth:`Api.call`, which counts it (``requests``: what the tests and
``bench.dynamodb_steps`` read), lets botocore's standard retry mode retry throttling and 5xx
a few times, then keeps retrying them with capped exponential backoff and full jitter for
``?retry_budget_s=`` (10 s by default) before raising
:class:`~fxdurable.errors.StoreUnavailableError`. Nothing raised here is a botocore exception.

A ``TransactWriteItems`` carries a ``ClientRequestToken``: DynamoDB applies a request with the
same token at most once within ten minutes, so re-sending a commit whose answer was lost is
safe and does not apply it twice. If it still cannot be sent, its outcome is unknown and
:class:`~fxdurable.errors.StoreUnavailableError` says so; the caller never takes it as failed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from botocore import exceptions as bx
from botocore.config import Config

from fxdurable.errors import ConfigurationError, StoreError, StoreUnavailableError
from fxdurable.stores._ddb_items import Item, Key, from_wire
from fxdurable.stores._ddb_settings import DynamoSettings

__all__ = ["Api", "Cancelled", "TableMissing"]

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10
_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 2.0
_BATCH_GET_MAX = 100
_BATCH_WRITE_MAX = 25
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


class Cancelled(Exception):
    """A ``TransactWriteItems`` DynamoDB cancelled: one reason code per item, in order
    (``ConditionalCheckFailed``, ``TransactionConflict``, ``None``...)."""

    def __init__(self, codes: list[str]) -> None:
        self.codes = codes
        super().__init__(", ".join(codes))


class TableMissing(StoreError):
    """The table does not exist (or is not ACTIVE yet)."""


class Api:
    """The DynamoDB and S3 clients of one store, shared by its threads."""

    def __init__(self, settings: DynamoSettings, session: Any = None) -> None:
        import boto3

        self.settings = settings
        self.where = settings.where
        self._lock = threading.Lock()
        self.requests = 0  # DynamoDB and S3 requests sent (botocore's own retries not counted)
        config = Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"mode": "standard", "max_attempts": 3},
        )
        maker = session or boto3
        try:
            self.dynamodb: Any = maker.client(
                "dynamodb",
                region_name=settings.region,
                endpoint_url=settings.endpoint_url,
                config=config,
            )
            self.s3: Any = (
                maker.client(
                    "s3",
                    region_name=settings.region,
                    endpoint_url=settings.endpoint_url,
                    config=config,
                )
                if settings.bucket
                else None
            )
        except bx.NoRegionError:
            raise ConfigurationError(
                f"no AWS region for the DynamoDB store ({self.where}): add ?region=... to the "
                "URL or set AWS_REGION"
            ) from None

    def close(self) -> None:
        for client in (self.dynamodb, self.s3):
            if client is not None:
                client.close()

    # -- one request --------------------------------------------------------------------------

    def call(
        self, client: Any, operation: str, *, unknown_outcome: bool = False, **params: Any
    ) -> Any:
        """``client.<operation>(**params)``, counted, retried while the service is throttling
        or failing (bounded), mapped to fxdurable errors. ``unknown_outcome``: a write whose
        loss in transit leaves its outcome unknown (said in the error)."""
        budget = self.settings.retry_budget_s
        deadline = time.monotonic() + budget
        failures = 0
        while True:
            with self._lock:
                self.requests += 1
            try:
                return getattr(client, operation)(**params)
            except bx.ClientError as exc:
                error = exc.response.get("Error", {})
                code = str(error.get("Code", ""))
                if code == "TransactionCanceledException":
                    reasons = exc.response.get("CancellationReasons") or []
                    raise Cancelled([str(r.get("Code", "None")) for r in reasons]) from None
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if code in _RETRYABLE or status >= 500:
                    cause: BaseException = exc
                else:
                    raise self._refused(operation, code, str(error.get("Message", exc))) from None
            except _UNREACHABLE as exc:
                cause = exc
            except bx.NoCredentialsError:
                raise ConfigurationError(
                    f"no AWS credentials for the DynamoDB store ({self.where}): set them in "
                    "the environment, a profile or the instance/Lambda role"
                ) from None
            except bx.BotoCoreError as exc:
                raise StoreError(f"{operation} on DynamoDB {self.where} failed: {exc}") from None
            failures += 1
            delay = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**failures))
            if time.monotonic() + delay > deadline:
                what = (
                    "its outcome is unknown (it may have been applied): read the records again"
                    if unknown_outcome
                    else "nothing was written"
                )
                raise StoreUnavailableError(
                    f"{operation} on DynamoDB {self.where} kept failing for "
                    f"{budget:g} s ({cause}); {what}",
                    where=self.where,
                    cause=cause,
                ) from None
            time.sleep(delay)

    def _refused(self, operation: str, code: str, message: str) -> ConfigurationError | StoreError:
        if code in _DENIED:
            return ConfigurationError(
                f"AWS refused {operation} on DynamoDB {self.where} ({code}): check the "
                "credentials and the IAM policy (docs/dynamodb.md lists the actions)"
            )
        if code == "ResourceNotFoundException":
            return TableMissing(
                f"no DynamoDB {self.where}: deploy it (infra/template.yaml) or open the store "
                "with create=True"
            )
        if code in ("NoSuchBucket",):
            return ConfigurationError(
                f"the S3 bucket of the DynamoDB store does not exist: {message}"
            )
        return StoreError(f"{operation} on DynamoDB {self.where} was refused ({code}): {message}")

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: Key) -> Item | None:
        reply = self.call(
            self.dynamodb,
            "get_item",
            TableName=self.settings.table,
            Key=_key(key),
            ConsistentRead=True,
        )
        raw = reply.get("Item")
        return from_wire(raw) if raw else None

    def batch_get(self, keys: Sequence[Key]) -> dict[Key, Item]:
        """The items of ``keys`` that exist, strongly consistent, 100 keys a request, and
        what DynamoDB left unprocessed asked again (with backoff: it means throttling)."""
        found: dict[Key, Item] = {}
        pending = [_key(k) for k in dict.fromkeys(keys)]
        table = self.settings.table
        rounds = 0
        while pending:
            chunk, pending = pending[:_BATCH_GET_MAX], pending[_BATCH_GET_MAX:]
            reply = self.call(
                self.dynamodb,
                "batch_get_item",
                RequestItems={table: {"Keys": chunk, "ConsistentRead": True}},
            )
            for raw in reply.get("Responses", {}).get(table, []):
                item = from_wire(raw)
                found[item.key] = item
            left = reply.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
            if left:
                rounds += 1
                self._unprocessed_pause(rounds, "reads")
                pending = left + pending
        return found

    def _unprocessed_pause(self, rounds: int, what: str) -> None:
        """Back off before asking again for what a batch left unprocessed (throttling); give
        up after 8 rounds."""
        if rounds > 8:
            raise StoreUnavailableError(
                f"DynamoDB {self.where} kept leaving {what} unprocessed (throttled)",
                where=self.where,
            )
        time.sleep(random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**rounds)))

    def batch_write(self, items: Sequence[dict[str, Any]]) -> None:
        """Put ``items`` (unconditionally), 25 a request, and what DynamoDB left unprocessed
        asked again (with backoff: it means throttling). Not atomic: callers write what
        proves the rest last, on its own."""
        pending = [{"PutRequest": {"Item": item}} for item in items]
        table = self.settings.table
        rounds = 0
        while pending:
            chunk, pending = pending[:_BATCH_WRITE_MAX], pending[_BATCH_WRITE_MAX:]
            reply = self.call(self.dynamodb, "batch_write_item", RequestItems={table: chunk})
            left = reply.get("UnprocessedItems", {}).get(table, [])
            if left:
                rounds += 1
                self._unprocessed_pause(rounds, "writes")
                pending = left + pending

    def query(
        self, pk: str, prefix: str, start: str | None = None, limit: int | None = None
    ) -> list[Item]:
        """Items of partition ``pk`` whose sort key starts with ``prefix`` (from ``start`` on,
        inclusive), in sort-key order, strongly consistent, every page (up to ``limit``)."""
        return [from_wire(raw) for raw in self._pages(pk, prefix, start, limit)]

    def query_raw(self, pk: str) -> list[dict[str, Any]]:
        """Every item of partition ``pk`` as DynamoDB sent it, in sort-key order."""
        return list(self._pages(pk, "", None, None))

    def _pages(
        self, pk: str, prefix: str, start: str | None, limit: int | None
    ) -> Iterator[dict[str, Any]]:
        values: dict[str, Any] = {":pk": {"S": pk}, ":p": {"S": prefix}}
        if start is not None:
            # Every key under the prefix sorts below prefix + U+FFFF (keys are ASCII).
            condition = "pk = :pk AND sk BETWEEN :a AND :z"
            values[":a"] = {"S": start}
            values[":z"] = {"S": prefix + "\uffff"}
            del values[":p"]
        elif prefix:
            condition = "pk = :pk AND begins_with(sk, :p)"
        else:  # the whole partition (DynamoDB refuses an empty begins_with)
            condition = "pk = :pk"
            del values[":p"]
        params: dict[str, Any] = {
            "TableName": self.settings.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        count = 0
        while True:
            if limit is not None:
                params["Limit"] = limit - count
            reply = self.call(self.dynamodb, "query", **params)
            for raw in reply.get("Items", []):
                count += 1
                yield raw
            last = reply.get("LastEvaluatedKey")
            if not last or (limit is not None and count >= limit):
                return
            params["ExclusiveStartKey"] = last

    # -- the commit ---------------------------------------------------------------------------

    def transact(self, items: list[dict[str, Any]], token: str) -> None:
        """One ``TransactWriteItems``; raises :class:`Cancelled` with the reasons."""
        self.call(
            self.dynamodb,
            "transact_write_items",
            unknown_outcome=True,
            TransactItems=items,
            ClientRequestToken=token,
        )


def _key(key: Key) -> dict[str, Any]:
    return {"pk": {"S": key[0]}, "sk": {"S": key[1]}}
