"""The DynamoDB store's requests: one place that calls boto3, counts, retries and maps errors.

Every request goes through :meth:`Api.call`, the loop every store's AWS requests share
(:mod:`fxdurable.stores._aws_calls`): it counts it (``requests``: what the tests and
``bench.dynamodb_steps`` read), retries throttling and 5xx for ``?retry_budget_s=`` (10 s by
default) before raising :class:`~fxdurable.errors.StoreUnavailableError`, and maps botocore's
errors in one table. Nothing raised here is a botocore exception.

A ``TransactWriteItems`` carries a ``ClientRequestToken``: DynamoDB applies a request with the
same token at most once within ten minutes, so re-sending a commit whose answer was lost is
safe and does not apply it twice. If it still cannot be sent, its outcome is unknown and
:class:`~fxdurable.errors.StoreUnavailableError` says so; the caller never takes it as failed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fxdurable.errors import StoreError, StoreUnavailableError
from fxdurable.stores._aws_calls import AwsCalls, aws_client
from fxdurable.stores._ddb_items import Item, Key, from_wire
from fxdurable.stores._ddb_settings import DynamoSettings

__all__ = ["Api", "Cancelled", "ConditionFailed", "TableMissing"]

_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 2.0
_BATCH_GET_MAX = 100
_BATCH_WRITE_MAX = 25


class Cancelled(Exception):
    """A ``TransactWriteItems`` DynamoDB cancelled: one reason code per item, in order
    (``ConditionalCheckFailed``, ``TransactionConflict``, ``None``...)."""

    def __init__(self, codes: list[str]) -> None:
        self.codes = codes
        super().__init__(", ".join(codes))


class ConditionFailed(StoreError):
    """A conditional ``PutItem`` or ``UpdateItem`` whose condition did not hold: nothing was
    written. Not a failure to its callers (the layout marker's compare-and-sets, a new
    store's marker), which read the item next to learn what is there."""


class TableMissing(StoreError):
    """The table does not exist (or is not ACTIVE yet)."""


class Api:
    """The DynamoDB and S3 clients of one store, shared by its threads."""

    def __init__(self, settings: DynamoSettings, session: Any = None) -> None:
        import boto3

        self.settings = settings
        self.where = settings.where
        self.calls = AwsCalls(
            service="DynamoDB",
            where=settings.where,
            retry_budget_s=settings.retry_budget_s,
            docs="docs/dynamodb.md",
            special=self._special,
        )
        maker = session or boto3
        store = f"DynamoDB store ({self.where})"
        self.dynamodb: Any = aws_client(
            maker,
            "dynamodb",
            region=settings.region,
            endpoint_url=settings.endpoint_url,
            store=store,
        )
        self.s3: Any = (
            aws_client(
                maker, "s3", region=settings.region, endpoint_url=settings.endpoint_url, store=store
            )
            if settings.bucket
            else None
        )

    @property
    def requests(self) -> int:
        """DynamoDB and S3 requests sent (botocore's own retries not counted)."""
        return self.calls.requests

    def close(self) -> None:
        for client in (self.dynamodb, self.s3):
            if client is not None:
                client.close()

    # -- one request --------------------------------------------------------------------------

    def call(
        self, client: Any, operation: str, *, unknown_outcome: bool = False, **params: Any
    ) -> Any:
        """One request through the shared loop (:mod:`._aws_calls`): counted, retried for
        ``?retry_budget_s=``, mapped to fxdurable errors."""
        return self.calls.call(client, operation, unknown_outcome=unknown_outcome, **params)

    def _special(self, code: str, response: Mapping[str, Any]) -> BaseException | None:
        if code == "TransactionCanceledException":
            reasons = response.get("CancellationReasons") or []
            return Cancelled([str(r.get("Code", "None")) for r in reasons])
        if code == "ConditionalCheckFailedException":
            return ConditionFailed(f"DynamoDB {self.where}: the write's condition did not hold")
        if code == "ResourceNotFoundException":
            return TableMissing(
                f"no DynamoDB {self.where}: deploy it (infra/template.yaml) or open the store "
                "with create=True"
            )
        return None

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
