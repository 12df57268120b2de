"""The DynamoDB store's URL: ``dynamodb://TABLE?region=&endpoint_url=&bucket=&...``.

The AWS parameters (and their defaults) are :mod:`fxdurable.stores._aws_options`'s, the same
for every store that offloads to S3. Credentials never come from the URL (boto3's usual
chain: environment, profile, instance or Lambda role), so ``store.url`` is the URL as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

from fxdurable.errors import ConfigurationError
from fxdurable.stores._aws_options import (
    DEFAULT_OFFLOAD_THRESHOLD,
    DEFAULT_S3_PREFIX,
    pop_aws_options,
)

__all__ = ["DEFAULT_OFFLOAD_THRESHOLD", "DEFAULT_S3_PREFIX", "DynamoSettings", "parse_url"]

_TABLE = re.compile(r"[A-Za-z0-9_.-]{3,255}")
# An item holds at most 400 KB: a record past ~350 KB must go to S3 to leave room for its
# keys and the transaction's other attributes.
_MAX_THRESHOLD = 350_000


@dataclass(frozen=True, slots=True)
class DynamoSettings:
    table: str
    region: str | None
    endpoint_url: str | None
    bucket: str | None  # None: no S3 offload
    s3_prefix: str
    offload_threshold: int  # bytes of one record's JSON past which it goes to S3
    retry_budget_s: float = 10.0  # how long throttling and 5xx are retried before giving up

    @property
    def where(self) -> str:
        return f"table {self.table!r}" + (f" at {self.endpoint_url}" if self.endpoint_url else "")


def parse_url(url: str) -> DynamoSettings:
    parsed = urlparse(url)
    if parsed.scheme != "dynamodb":
        raise ConfigurationError(f"not a DynamoDB URL: {url!r} (expected dynamodb://TABLE)")
    table = parsed.netloc
    if parsed.path not in ("", "/") or not _TABLE.fullmatch(table):
        raise ConfigurationError(
            f"not a DynamoDB table name in {url!r}: 3 to 255 letters, digits, '_', '-', '.'"
        )
    options = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
    aws = pop_aws_options(options, url, max_threshold=_MAX_THRESHOLD)
    if options:
        raise ConfigurationError(f"unknown DynamoDB URL options {sorted(options)} in {url!r}")
    return DynamoSettings(
        table=table,
        region=aws.region,
        endpoint_url=aws.endpoint_url,
        bucket=aws.bucket,
        s3_prefix=aws.s3_prefix,
        offload_threshold=aws.offload_threshold,
        retry_budget_s=aws.retry_budget_s,
    )
