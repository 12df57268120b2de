"""PostgreSQL stores with an S3 bucket for tests: a schema (``postgres_url``) and a bucket of
each test's own on the moto server, dummy credentials passed by ``session=``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from aws_support import REGION, aws_session
from dynamo_support import new_bucket

from fxdurable.stores.postgres import PostgresStore

__all__ = ["pg_s3_store", "pg_s3_url", "s3_client"]


def pg_s3_url(postgres_url: str, endpoint_url: str, offload_threshold: int, **extra: str) -> str:
    """``postgres_url`` with a fresh bucket on ``endpoint_url`` and the threshold."""
    url = (
        f"{postgres_url}&bucket={new_bucket(endpoint_url)}&region={REGION}"
        f"&endpoint_url={endpoint_url}&offload_threshold={offload_threshold}"
    )
    return url + "".join(f"&{k}={v}" for k, v in extra.items())


def pg_s3_store(postgres_url: str, endpoint_url: str, offload_threshold: int) -> PostgresStore:
    return PostgresStore(
        pg_s3_url(postgres_url, endpoint_url, offload_threshold), session=aws_session()
    )


@contextlib.contextmanager
def s3_client(endpoint_url: str | None) -> Iterator[Any]:
    client = aws_session().client("s3", endpoint_url=endpoint_url)
    try:
        yield client
    finally:
        client.close()
