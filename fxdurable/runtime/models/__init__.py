"""Model clients: scripted (offline), OpenAI-compatible and Anthropic (streaming over httpx).

The provider clients load on first use (:mod:`fxdurable.core.lazy`): importing
``fxdurable.runtime.models.base`` or ``.scripted`` loads no httpx.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from fxdurable.core.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; the table below is what runs
    from fxdurable.runtime.models.anthropic import AnthropicModel
    from fxdurable.runtime.models.caching import PromptCache
    from fxdurable.runtime.models.http import Timeouts, aclose_clients
    from fxdurable.runtime.models.openai import OpenAIModel
    from fxdurable.runtime.models.openai_responses import OpenAIResponsesModel
    from fxdurable.runtime.models.providers import resolve_model

__all__ = [
    "AnthropicModel",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "PromptCache",
    "Timeouts",
    "aclose_clients",
    "aclose_loaded_clients",
    "resolve_model",
]


async def aclose_loaded_clients() -> None:
    """Close the provider HTTP clients of the running loop before it ends, if a provider was
    ever loaded. A process that never used one has nothing to close, and does not import the
    HTTP module (and httpx) to find that out."""
    http = sys.modules.get("fxdurable.runtime.models.http")
    if http is not None:
        await http.aclose_clients()


# Hidden from type checkers, which read the imports above instead: a misspelt name stays an
# error there rather than an ``object`` from ``__getattr__``.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "fxdurable.runtime.models.anthropic": ("AnthropicModel",),
            "fxdurable.runtime.models.caching": ("PromptCache",),
            "fxdurable.runtime.models.http": ("Timeouts", "aclose_clients"),
            "fxdurable.runtime.models.openai": ("OpenAIModel",),
            "fxdurable.runtime.models.openai_responses": ("OpenAIResponsesModel",),
            "fxdurable.runtime.models.providers": ("resolve_model",),
        },
    )
