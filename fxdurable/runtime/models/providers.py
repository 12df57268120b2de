"""Model strings: ``"openai/<model>"``, ``"anthropic/<model>"`` and ``"openai-responses/<model>"``
(the OpenAI Responses API) name a provider's model.

Everything after the first ``/`` is the provider's model name, slashes included
(``"openai/meta-llama/Llama-3.1-8B-Instruct"`` for a vLLM server). Keys and base URLs come
from the environment (see :class:`OpenAIModel`, :class:`AnthropicModel`).
"""

from __future__ import annotations

from collections.abc import Callable

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.anthropic import AnthropicModel
from fxdurable.runtime.models.base import Model
from fxdurable.runtime.models.openai import OpenAIModel
from fxdurable.runtime.models.openai_responses import OpenAIResponsesModel

__all__ = ["PROVIDERS", "resolve_model"]

# prefix -> (model name, base_url) -> model
PROVIDERS: dict[str, Callable[[str, str | None], Model]] = {
    OpenAIModel.prefix: lambda model, base_url: OpenAIModel(model, base_url=base_url),
    AnthropicModel.prefix: lambda model, base_url: AnthropicModel(model, base_url=base_url),
    OpenAIResponsesModel.prefix: lambda model, base_url: OpenAIResponsesModel(
        model, base_url=base_url
    ),
}


def resolve_model(spec: str | Model, *, base_url: str | None = None) -> Model:
    """The model ``spec`` names; a :class:`Model` object is returned as it is.

    ``base_url`` overrides the provider's default and environment setting (an agent talking
    to its own vLLM or gateway, say).
    """
    if not isinstance(spec, str):
        if base_url is not None:
            raise ConfigurationError(
                "base_url applies to model strings such as 'openai/<model>'; "
                f"configure the {type(spec).__name__} object itself instead"
            )
        return spec
    prefix, slash, model = spec.partition("/")
    known = ", ".join(f"'{name}/<model>'" for name in PROVIDERS)
    make = PROVIDERS.get(prefix)
    if make is None:
        raise ConfigurationError(
            f"unknown model {spec!r}: use {known}, or pass a model object "
            "(fxdurable.ScriptedModel for tests and demos)"
        )
    if not slash or not model:
        raise ConfigurationError(f"model {spec!r} names no model: write '{prefix}/<model>'")
    return make(model, base_url)
