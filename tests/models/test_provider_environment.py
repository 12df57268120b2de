"""Model configuration read from the environment as the providers' own SDKs read it.

``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` (the FXD_ names win when set, empty values count
as unset), ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``, ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID``
as the ``OpenAI-Organization`` / ``OpenAI-Project`` headers. Every request goes through the
real httpx client to the scripted model server, and what arrived is checked on its side.
"""

from __future__ import annotations

import logging

import pytest
from provider_e2e_support import run

import fxdurable as fx
from fxdurable.errors import ModelError, ModelRetryableError
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.runtime.models.announce import announce_model_endpoints, describe_model_endpoints
from fxdurable.runtime.models.base import ChatMessage, Finish, ModelRequest, ModelResponse
from fxdurable.testing.model_server import ScriptedModelServer
from fxdurable.testing.net import free_port
from fxdurable.testing.wire_common import Failure, Quirks
from tests.kit.provider_env import clear_provider_environment

SECRET = "sk-env-key-NEVER-LOGGED-4471"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_provider_environment(monkeypatch)


def _ask(model: OpenAIModel | AnthropicModel) -> ModelResponse:
    async def go() -> ModelResponse:
        request = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
        async for part in model.stream(request):
            if isinstance(part, Finish):
                return part.response
        raise AssertionError("no finish")

    return run(go())


def test_openai_base_url_key_org_and_project_reach_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ScriptedModelServer([fx.reply("from the gateway")]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url + "/")  # trailing slash
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_ORG_ID", "org-acme")
        monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_rockets")
        model = OpenAIModel("llama3")
        assert _ask(model).text == "from the gateway"
        base_url = server.openai_base_url
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["openai-organization"] == "org-acme"
    assert sent.headers["openai-project"] == "proj_rockets"
    assert "authorization" in sent.headers, "the key from OPENAI_API_KEY was sent"
    assert model.base_url == base_url
    assert model.base_url_source == "OPENAI_BASE_URL"


def test_the_server_checks_the_key_it_was_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key really is OPENAI_API_KEY's (the server refuses any other with a 401)."""
    quirks = Quirks(require_api_key=SECRET)
    with ScriptedModelServer([fx.reply("ok")], quirks=quirks) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        assert _ask(OpenAIModel("m")).text == "ok"
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
        with pytest.raises(ModelError, match="HTTP 401") as refused:
            _ask(OpenAIModel("m"))
        host = server.url.removeprefix("http://")
    assert str(refused.value).startswith(f"{host} rejected the credentials"), refused.value
    assert "OPENAI_API_KEY" in str(refused.value)
    assert [r.status for r in server.requests] == [200, 401]


def test_without_org_or_project_no_such_header_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedModelServer([fx.reply("ok")]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_ORG_ID", "")  # empty: unset, as for the base URL
        _ask(OpenAIModel("m"))
    (sent,) = server.requests
    assert "openai-organization" not in sent.headers
    assert "openai-project" not in sent.headers
    assert "authorization" not in sent.headers, "no key: no Authorization (local servers)"


def test_explicit_organization_and_project_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ScriptedModelServer([fx.reply("ok")]) as server:
        monkeypatch.setenv("OPENAI_ORG_ID", "org-env")
        model = OpenAIModel(
            "m", base_url=server.openai_base_url, organization="org-given", project="p-given"
        )
        _ask(model)
    (sent,) = server.requests
    assert sent.headers["openai-organization"] == "org-given"
    assert sent.headers["openai-project"] == "p-given"


def test_fxd_base_url_wins_over_the_sdk_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: a request there fails
    with ScriptedModelServer([fx.reply("fxd wins")]) as server:
        monkeypatch.setenv("FXD_OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", dead)
        model = OpenAIModel("m")
        assert _ask(model).text == "fxd wins"
    assert model.base_url_source == "FXD_OPENAI_BASE_URL"
    assert len(server.requests) == 1


def test_an_empty_fxd_variable_leaves_the_sdk_variable_in_charge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ScriptedModelServer([fx.reply("sdk variable")]) as server:
        monkeypatch.setenv("FXD_OPENAI_BASE_URL", "")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        model = OpenAIModel("m")
        assert _ask(model).text == "sdk variable"
    assert model.base_url_source == "OPENAI_BASE_URL"


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_base_url_variable_means_the_public_endpoint(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """openai-python#2927: OPENAI_BASE_URL="" (a compose file's ${VAR:-}) is no override."""
    monkeypatch.setenv("OPENAI_BASE_URL", value)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", value)
    openai, anthropic = OpenAIModel("m"), AnthropicModel("c")
    assert (openai.base_url, openai.base_url_source) == ("https://api.openai.com/v1", "default")
    assert (anthropic.base_url, anthropic.base_url_source) == (
        "https://api.anthropic.com",
        "default",
    )


def test_an_explicit_base_url_wins_over_every_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FXD_OPENAI_BASE_URL", "http://fxd.test/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://sdk.test/v1")
    model = OpenAIModel("m", base_url="http://given.test/v1/")
    assert (model.base_url, model.base_url_source) == ("http://given.test/v1", "base_url=")


def test_anthropic_base_url_and_key_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    quirks = Quirks(require_api_key=SECRET)
    with ScriptedModelServer([fx.reply("from claude's gateway")], quirks=quirks) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url + "/")
        monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
        model = AnthropicModel("claude-x")
        assert _ask(model).text == "from claude's gateway"
    (sent,) = server.requests
    assert sent.path == "/v1/messages"
    assert "x-api-key" in sent.headers and "anthropic-version" in sent.headers
    assert model.base_url_source == "ANTHROPIC_BASE_URL"


def test_fxd_anthropic_base_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedModelServer([fx.reply("fxd")]) as server:
        monkeypatch.setenv("FXD_ANTHROPIC_BASE_URL", server.anthropic_base_url)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{free_port()}")
        assert _ask(AnthropicModel("c")).text == "fxd"


def test_an_unreachable_endpoint_is_named_by_its_host_not_as_openai(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ModelRetryableError) as failed:
        _ask(OpenAIModel("llama3"))
    message = str(failed.value)
    assert message.startswith(f"could not connect to 127.0.0.1:{port} at "), message
    assert "OpenAI" not in message


def test_an_error_from_another_providers_host_names_that_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quirks = Quirks(fail_first=[Failure("rate_limited")])
    with ScriptedModelServer([fx.reply("later")], quirks=quirks) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
        host = server.url.removeprefix("http://")
        with pytest.raises(ModelRetryableError) as failed:
            _ask(AnthropicModel("c"))
    assert str(failed.value).startswith(f"{host} rate-limited the request (HTTP 429)")
    assert "Anthropic" not in str(failed.value)


def test_the_providers_own_endpoint_is_still_called_by_the_providers_name() -> None:
    from fxdurable.runtime.models.endpoint import endpoint_label

    default = OpenAIModel.default_base_url
    assert endpoint_label(default, default_url=default, provider="OpenAI") == "OpenAI"
    assert (
        endpoint_label("https://api.groq.com/openai/v1", default_url=default, provider="OpenAI")
        == "api.groq.com"
    )
    assert (
        endpoint_label("http://localhost:11434/v1", default_url=default, provider="OpenAI")
        == "localhost:11434"
    )


def test_the_log_line_says_each_endpoint_and_its_variable_never_the_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_ORG_ID", "org-acme")
    agents = [
        fx.Agent("local", "openai/llama3"),
        fx.Agent("twin", "openai/llama3.1"),  # same endpoint: said once
        fx.Agent("claude", "anthropic/claude-x"),
        fx.Agent("offline", fx.ScriptedModel([fx.reply("hi")])),
    ]
    with caplog.at_level(logging.INFO, logger="fxdurable.startup"):
        line = announce_model_endpoints(agents, process="fxdurable worker")
    assert line == (
        "fxdurable worker: model endpoints: "
        "openai http://localhost:11434/v1 (from OPENAI_BASE_URL; key from OPENAI_API_KEY: set; "
        "OpenAI-Organization from OPENAI_ORG_ID); "
        "anthropic https://api.anthropic.com (default; key from ANTHROPIC_API_KEY: missing)"
    )
    assert [r.getMessage() for r in caplog.records if r.name == "fxdurable.startup"] == [line]
    assert SECRET not in caplog.text and "org-acme" not in caplog.text


def test_the_log_line_of_agents_without_a_provider_model() -> None:
    agents = [fx.Agent("offline", fx.ScriptedModel([fx.reply("hi")]))]
    assert describe_model_endpoints(agents) == (
        "model endpoints: none (no HTTP provider model: scripted)"
    )
