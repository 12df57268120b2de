"""Model clients: scripted (offline), OpenAI-compatible and Anthropic (streaming over httpx)."""

from __future__ import annotations

from fxdurable.runtime.models.anthropic import AnthropicModel
from fxdurable.runtime.models.http import Timeouts, aclose_clients
from fxdurable.runtime.models.openai import OpenAIModel
from fxdurable.runtime.models.providers import resolve_model

__all__ = ["AnthropicModel", "OpenAIModel", "Timeouts", "aclose_clients", "resolve_model"]
