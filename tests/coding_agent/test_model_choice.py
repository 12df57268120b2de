"""Which model the coding agent's environment chooses, and what its processes say about it at
startup: the endpoint is credited to the variable that set it (``OPENAI_BASE_URL``), never to
a ``base_url=`` argument the person never wrote."""

from __future__ import annotations

import pytest

import fxdurable as fx
from examples.coding_agent.agent import model_from_env
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models.announce import describe_model_endpoints
from tests.kit.provider_env import clear_provider_environment

LOCAL = "http://127.0.0.1:8765/v1"


@pytest.fixture(autouse=True)
def no_model_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_environment(monkeypatch, "FXD_CODING_MODEL")


def announced(model: fx.Model) -> str:
    return describe_model_endpoints([fx.Agent("coder", model)])


def test_a_local_server_without_a_key_is_credited_to_openai_base_url(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", LOCAL + "/")
    monkeypatch.setenv("FXD_CODING_MODEL", "scripted-coder")
    chosen = model_from_env()
    assert chosen is not None
    model, said = chosen
    assert said == f"scripted-coder at {LOCAL} (OPENAI_BASE_URL)"
    assert announced(model) == (
        f"model endpoints: openai {LOCAL} (from OPENAI_BASE_URL; key from OPENAI_API_KEY: missing)"
    )


def test_a_key_and_a_base_url_credit_each_to_its_variable(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", LOCAL)
    chosen = model_from_env()
    assert chosen is not None
    model, said = chosen
    assert said == f"OpenAI gpt-4o-mini at {LOCAL} (OPENAI_API_KEY; endpoint from OPENAI_BASE_URL)"
    assert "(from OPENAI_BASE_URL; key from OPENAI_API_KEY: set)" in announced(model)


def test_a_key_alone_is_openai_itself(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chosen = model_from_env()
    assert chosen is not None
    model, said = chosen
    assert said == "OpenAI gpt-4o-mini (OPENAI_API_KEY)"
    assert "https://api.openai.com/v1 (default;" in announced(model)


def test_fxdurables_own_variable_wins_and_is_the_one_named(monkeypatch):
    monkeypatch.setenv("FXD_OPENAI_BASE_URL", LOCAL)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://elsewhere.test/v1")
    monkeypatch.setenv("FXD_CODING_MODEL", "scripted-coder")
    chosen = model_from_env()
    assert chosen is not None
    assert chosen[1] == f"scripted-coder at {LOCAL} (FXD_OPENAI_BASE_URL)"


def test_a_base_url_without_a_key_or_a_model_name_says_what_to_set(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", LOCAL)
    with pytest.raises(ConfigurationError, match="name the model the server runs"):
        model_from_env()


def test_nothing_set_is_no_real_model():
    assert model_from_env() is None
