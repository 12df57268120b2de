"""The AWS parameters a store URL may carry, spelt and checked once for every store that
offloads to S3 (DynamoDB: ``dynamodb://TABLE?...``, PostgreSQL: ``postgresql://...?...``).

==================  ==========  ===========================================================
parameter           default     meaning
==================  ==========  ===========================================================
``bucket``          (none)      the S3 bucket large data goes to; none: no S3 at all
``s3_prefix``       fxd-blobs   the key prefix in the bucket (``<s3_prefix>/sha256/<hex>``)
``offload_threshold`` 65536     bytes past which data goes to S3 (with a bucket)
``region``          boto3's     the AWS region of the clients
``endpoint_url``    AWS         an http(s) endpoint instead of AWS's (moto, LocalStack, MinIO)
``retry_budget_s``  10          how long throttling, 5xx and an unreachable endpoint are
                                retried before :class:`~fxdurable.errors.StoreUnavailableError`
==================  ==========  ===========================================================

Credentials never come from a URL (boto3's usual chain: environment, profile, instance or
Lambda role), so a URL holding these is safe to log. Nothing here imports boto3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlparse

from fxdurable.errors import ConfigurationError

__all__ = [
    "AWS_OPTIONS",
    "DEFAULT_OFFLOAD_THRESHOLD",
    "DEFAULT_S3_PREFIX",
    "AwsOptions",
    "pop_aws_options",
]

DEFAULT_OFFLOAD_THRESHOLD = 64 * 1024
DEFAULT_S3_PREFIX = "fxd-blobs"
AWS_OPTIONS = (
    "bucket",
    "s3_prefix",
    "offload_threshold",
    "region",
    "endpoint_url",
    "retry_budget_s",
)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True, slots=True)
class AwsOptions:
    region: str | None
    endpoint_url: str | None
    bucket: str | None  # None: no S3 offload
    s3_prefix: str
    offload_threshold: int  # bytes past which data goes to S3
    retry_budget_s: float  # how long throttling and 5xx are retried before giving up
    given: tuple[str, ...]  # the parameters the URL named (a store may refuse some)


def pop_aws_options(options: dict[str, str], url: str, *, max_threshold: int) -> AwsOptions:
    """Take the AWS parameters out of a URL's ``options`` (the rest stays for the store);
    :class:`ConfigurationError` for a malformed one. ``max_threshold``: the store's bound on
    ``offload_threshold`` (what one of its rows or items can hold)."""
    given = tuple(name for name in AWS_OPTIONS if name in options)
    region = options.pop("region", "") or None
    endpoint_url = options.pop("endpoint_url", "") or None
    bucket = options.pop("bucket", "") or None
    s3_prefix = options.pop("s3_prefix", DEFAULT_S3_PREFIX).strip("/")
    threshold_text = options.pop("offload_threshold", str(DEFAULT_OFFLOAD_THRESHOLD))
    budget_text = options.pop("retry_budget_s", "10")
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
    if not 1 <= threshold <= max_threshold:
        raise ConfigurationError(f"offload_threshold must be 1 to {max_threshold} bytes in {url!r}")
    return AwsOptions(
        region=region,
        endpoint_url=endpoint_url,
        bucket=bucket,
        s3_prefix=s3_prefix or DEFAULT_S3_PREFIX,
        offload_threshold=threshold,
        retry_budget_s=retry_budget_s,
        given=given,
    )
