"""Shared by the conftests that start their own redis-server (tests/ and tests/workers/)."""

from __future__ import annotations

import os
import socket

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unavailable(reason: str, what: str = "the Redis tests") -> None:
    """Fail in CI, skip elsewhere: a missing Redis must not pass silently in CI. This is the
    only place tests skip, and only on a machine without redis-server."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: {what} must run)", pytrace=False)
    pytest.skip(reason)
