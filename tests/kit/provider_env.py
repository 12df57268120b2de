"""The environment variables that choose a model provider, its endpoint or its key: tests
that read the environment start from none of them set, whatever the machine has."""

from __future__ import annotations

import pytest

PROVIDER_VARIABLES = (
    "FXD_OPENAI_BASE_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "FXD_ANTHROPIC_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
)


def clear_provider_environment(monkeypatch: pytest.MonkeyPatch, *more: str) -> None:
    """Unset every provider variable, and ``more`` (an application's own)."""
    for name in (*PROVIDER_VARIABLES, *more):
        monkeypatch.delenv(name, raising=False)
