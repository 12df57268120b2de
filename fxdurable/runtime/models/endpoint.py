"""Where a provider model sends its requests, and which setting said so.

The environment is read as the providers' own SDKs read it (openai-python, anthropic-sdk-python):
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, else the public endpoint; fxdurable's own
``FXD_OPENAI_BASE_URL`` / ``FXD_ANTHROPIC_BASE_URL`` win when set. A value that is empty (or only
whitespace) counts as unset: ``OPENAI_BASE_URL=`` from a compose file or CI template means "no
override" (the SDK maintainers call the opposite a bug, openai-python#2927). A trailing slash
is dropped; the SDKs add one before joining the path, so ``…/v1`` and ``…/v1/`` reach the same
URL in both.

Messages name the endpoint that failed by its host (``api.groq.com``, ``localhost:11434``)
when it is not the provider's own, so an error from Ollama does not read as one from OpenAI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

__all__ = ["DEFAULT_SOURCE", "EXPLICIT_SOURCE", "BaseUrl", "endpoint_label", "env_value"]

EXPLICIT_SOURCE = "base_url="  # given to the constructor (or resolve_model's base_url=)
DEFAULT_SOURCE = "default"  # nothing set: the provider's public endpoint


@dataclass(frozen=True, slots=True)
class BaseUrl:
    """A base URL without its trailing slash, and what set it: :data:`EXPLICIT_SOURCE`, the
    name of the environment variable, or :data:`DEFAULT_SOURCE`."""

    url: str
    source: str

    @classmethod
    def resolve(
        cls,
        explicit: str | None,
        envs: Sequence[str],
        default: str,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> BaseUrl:
        """``explicit`` if given, else the first of ``envs`` set to something, else
        ``default``."""
        if explicit and explicit.strip():
            return cls(explicit.strip().rstrip("/"), EXPLICIT_SOURCE)
        for name in envs:
            value = env_value(name, environ)
            if value is not None:
                return cls(value.rstrip("/"), name)
        return cls(default.rstrip("/"), DEFAULT_SOURCE)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value, stripped; ``None`` when unset or empty."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def endpoint_label(url: str, *, default_url: str, provider: str) -> str:
    """How messages name the endpoint: ``provider`` ("OpenAI") when ``url`` is on the
    provider's own host, else the host (with its port when one is given)."""
    try:
        parsed = httpx.URL(url)
        own = httpx.URL(default_url)
    except httpx.InvalidURL:
        return provider
    if not parsed.host or parsed.host == own.host:
        return provider
    return f"{parsed.host}:{parsed.port}" if parsed.port is not None else parsed.host
