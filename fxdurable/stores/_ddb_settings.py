"""The DynamoDB store's URL: ``dynamodb://TABLE?region=&endpoint_url=&bucket=&...``.

Credentials never come from the URL (boto3's usual chain: environment, profile, instance or
Lambda role), so ``store.url`` is the URL as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

from fxdurable.errors import ConfigurationError

__all__ = ["DEFAULT_OFFLOAD_THRESHOLD", "DEFAULT_S3_PREFIX", "DynamoSettings", "parse_url"]

DEFAULT_OFFLOAD_THRESHOLD = 64 * 1024
DEFAULT_S3_PREFIX = "fxd-blobs"
_TABLE = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


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
    region = options.pop("region", "") or None
    endpoint_url = options.pop("endpoint_url", "") or None
    bucket = options.pop("bucket", "") or None
    s3_prefix = options.pop("s3_prefix", DEFAULT_S3_PREFIX).strip("/")
    threshold_text = options.pop("offload_threshold", str(DEFAULT_OFFLOAD_THRESHOLD))
    budget_text = options.pop("retry_budget_s", "10")
    if options:
        raise ConfigurationError(f"unknown DynamoDB URL options {sorted(options)} in {url!r}")
    if endpoint_url is not None and urlparse(endpoint_url).scheme not in ("http", "https"):
        raise ConfigurationError(f"endpoint_url must be an http(s) URL in {url!r}")
    if bucket is not None and not _BUCKET.fullmatch(bucket):
        raise ConfigurationError(f"not an S3 bucket name: {bucket!r} in {url!r}")
    try:
        threshold = int(threshold_text)
    except ValueError:
        raise ConfigurationError(
            f"offload_threshold must be a whole number of bytes in {url!r}"
        ) from None
    try:
        retry_budget_s = float(budget_text)
    except ValueError:
        retry_budget_s = -1.0
    if not 0 <= retry_budget_s <= 300:
        raise ConfigurationError(f"retry_budget_s must be 0 to 300 seconds in {url!r}")
    if not 1 <= threshold <= 350_000:
        # An item holds at most 400 KB: a record past ~350 KB must go to S3 to leave room
        # for its keys and the transaction's other attributes.
        raise ConfigurationError(f"offload_threshold must be 1 to 350000 bytes in {url!r}")
    return DynamoSettings(
        table=table,
        region=region,
        endpoint_url=endpoint_url,
        bucket=bucket,
        s3_prefix=s3_prefix or DEFAULT_S3_PREFIX,
        offload_threshold=threshold,
        retry_budget_s=retry_budget_s,
    )
