"""Model strings resolve to provider clients; anything else is a clear configuration error."""

from __future__ import annotations

import pytest

import fxdurable as fx
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models import AnthropicModel, OpenAIModel, resolve_model


def test_provider_strings(monkeypatch):
    monkeypatch.delenv("FXD_OPENAI_BASE_URL", raising=False)
    openai = resolve_model("openai/gpt-4o")
    assert isinstance(openai, OpenAIModel)
    assert openai.name == "openai/gpt-4o"
    assert openai.base_url == "https://api.openai.com/v1"
    anthropic = resolve_model("anthropic/claude-sonnet-4-5", base_url="http://gw.test")
    assert isinstance(anthropic, AnthropicModel)
    assert anthropic.name == "anthropic/claude-sonnet-4-5"
    assert anthropic.base_url == "http://gw.test"


def test_model_names_may_contain_slashes():
    model = resolve_model("openai/meta-llama/Llama-3.1-8B-Instruct", base_url="http://vllm:8000/v1")
    assert isinstance(model, OpenAIModel)
    assert model.model == "meta-llama/Llama-3.1-8B-Instruct"


def test_model_objects_pass_through():
    scripted = fx.ScriptedModel([fx.reply("hi")])
    assert resolve_model(scripted) is scripted
    with pytest.raises(ConfigurationError, match="base_url"):
        resolve_model(scripted, base_url="http://x.test")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            "scripted",
            "unknown model 'scripted'.*'openai/<model>'.*'anthropic/<model>'.*ScriptedModel",
        ),
        ("gemini/pro", "unknown model 'gemini/pro'"),
        ("gpt-4o", "unknown model 'gpt-4o'"),
        ("", "unknown model ''"),
        ("openai/", "names no model"),
        ("anthropic", "names no model"),
    ],
)
def test_bad_strings(spec, says):
    with pytest.raises(ConfigurationError, match=says):
        resolve_model(spec)
