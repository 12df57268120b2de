"""Shared by the conftests that start their own redis-server (tests/ and tests/workers/)."""

from __future__ import annotations

import os

import pytest
import redis

from fxdurable.testing.net import free_port

__all__ = ["dump", "free_port", "prefix_of", "unavailable"]


def unavailable(reason: str, what: str = "the Redis tests") -> None:
    """Fail in CI, skip elsewhere: a missing Redis must not pass silently in CI. This is the
    only place tests skip, and only on a machine without redis-server."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: {what} must run)", pytrace=False)
    pytest.skip(reason)


def prefix_of(url: str) -> str:
    return url.rsplit("prefix=", 1)[1].split("&")[0]


def dump(url: str) -> dict[bytes, bytes]:
    """Every key under the URL's prefix with its serialized value (committed data only: not
    the commits' tokens, which even a refused commit records for a resend to read)."""
    client = redis.Redis.from_url(url.split("?")[0])
    tokens = f"{prefix_of(url)}:tok:".encode()
    try:
        keys = sorted(client.scan_iter(match=f"{prefix_of(url)}:*", count=1000))
        return {k: client.dump(k) for k in keys if not k.startswith(tokens)}  # type: ignore[misc]
    finally:
        client.close()
