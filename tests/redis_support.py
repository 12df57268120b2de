"""Shared by the conftests that start their own redis-server (tests/ and tests/workers/)."""

from __future__ import annotations

import os

import pytest

from fxdurable.testing.net import free_port

__all__ = ["free_port", "unavailable"]


def unavailable(reason: str, what: str = "the Redis tests") -> None:
    """Fail in CI, skip elsewhere: a missing Redis must not pass silently in CI. This is the
    only place tests skip, and only on a machine without redis-server."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: {what} must run)", pytrace=False)
    pytest.skip(reason)
