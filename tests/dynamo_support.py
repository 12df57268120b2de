"""DynamoDB stores for tests: a table (and bucket) of each test's own on the moto server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aws_support import REGION, aws_session

from fxdurable.stores.dynamodb import DynamoStore

__all__ = [
    "dynamo_store",
    "dynamo_url",
    "made_dynamo_url",
    "new_bucket",
    "offloaded_keys",
    "request_counter",
]


def new_bucket(endpoint_url: str) -> str:
    name = f"fxd-{uuid.uuid4().hex[:16]}"
    aws_session().client("s3", endpoint_url=endpoint_url).create_bucket(Bucket=name)
    return name


def offloaded_keys(store_url: str) -> list[str]:
    """The keys of the objects in the bucket a ``dynamodb://`` URL names (its S3 offload)."""
    from fxdurable.stores._ddb_settings import parse_url

    settings = parse_url(store_url)
    assert settings.bucket is not None, f"no bucket in {store_url}"
    s3 = aws_session().client("s3", endpoint_url=settings.endpoint_url)
    try:
        answer = s3.list_objects_v2(Bucket=settings.bucket)
    finally:
        s3.close()
    return [str(o["Key"]) for o in answer.get("Contents", [])]


def dynamo_url(endpoint_url: str, *, offload_threshold: int | None = None, bucket: str = "") -> str:
    """The URL of a fresh table; with ``offload_threshold``, of a fresh bucket too."""
    url = f"dynamodb://fxd-{uuid.uuid4().hex[:16]}?region={REGION}&endpoint_url={endpoint_url}"
    if offload_threshold is not None:
        url += f"&bucket={bucket or new_bucket(endpoint_url)}&offload_threshold={offload_threshold}"
    return url


def made_dynamo_url(endpoint_url: str, *, offload_threshold: int | None = None) -> str:
    """:func:`dynamo_url`, its table made here: for stores that several processes open with
    ``create`` on (workers, a crash test's drivers), none of which should be the one racing
    the others to make it."""
    url = dynamo_url(endpoint_url, offload_threshold=offload_threshold)
    DynamoStore(url, create=True, session=aws_session()).close()
    return url


def dynamo_store(
    endpoint_url: str, *, offload_threshold: int | None = None, create: bool = True
) -> DynamoStore:
    url = dynamo_url(endpoint_url, offload_threshold=offload_threshold)
    return DynamoStore(url, create=create, session=aws_session())


@contextmanager
def request_counter(store: DynamoStore) -> Iterator[list[str]]:
    """The DynamoDB/S3 operations the store's clients send inside the block, by botocore's
    own ``before-call`` hook (so the count does not trust the store's own counter)."""
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    clients = [store._api.dynamodb] + ([store._api.s3] if store._api.s3 is not None else [])
    for client in clients:
        client.meta.events.register("before-call", count)
    try:
        yield calls
    finally:
        for client in clients:
            client.meta.events.unregister("before-call", count)
