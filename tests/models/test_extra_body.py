"""``extra_body``: provider request fields fxdurable does not write itself (Anthropic's
``thinking``, OpenAI's ``reasoning`` effort, a gateway's own), sent on every request of the
model, before the conversation, through the real httpx client against the scripted server."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from provider_e2e_support import fresh_store, run, runtime
from test_caching import lookup, two_lookups_then_answer

import fxdurable as fx
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models import AnthropicModel, OpenAIModel, OpenAIResponsesModel
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.testing.model_server import Quirks, ScriptedModelServer
from fxdurable.testing.prompt_prefix import prefix_before_latest

THINKING = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
EFFORT = {"reasoning": {"effort": "high", "summary": "auto"}}


def model_for(wire: str, server: ScriptedModelServer, extra: dict[str, Any]) -> Any:
    if wire == "anthropic":
        return AnthropicModel("claude-x", base_url=server.url, extra_body=extra)
    model_type = OpenAIModel if wire == "openai" else OpenAIResponsesModel
    return model_type("gpt-x", base_url=server.openai_base_url, extra_body=extra)


@pytest.mark.parametrize(
    ("wire", "extra", "conversation"),
    [
        ("anthropic", THINKING, "messages"),
        ("openai", {"reasoning_effort": "high", "seed": 7}, "messages"),
        ("openai-responses", EFFORT, "input"),
    ],
)
def test_every_request_carries_the_fields_before_the_conversation(
    tmp_path: Path, wire: str, extra: dict[str, Any], conversation: str
) -> None:
    quirks = Quirks(prompt_cache=True, reasoning=True)
    with ScriptedModelServer(two_lookups_then_answer, quirks=quirks) as server:
        agent = fx.Agent("a", model_for(wire, server, extra), "Be careful.", tools=[lookup])

        async def go() -> None:
            async with runtime(tmp_path, [agent], store=fresh_store(tmp_path)) as rt:
                assert await rt.session("x-1").run("Find it.", timeout=8) == "Done looking."

        run(go(), timeout=20)
    raws = [r.raw for r in server.requests]
    assert len(raws) == 3 and [r.status for r in server.requests] == [200] * 3
    for raw in raws:
        body = json.loads(raw)
        for key, value in extra.items():
            assert body[key] == value
        assert list(body)[-1] == conversation, list(body)  # the conversation stays last
    # ... so a step still repeats the bytes the step before sent (the cacheable prefix).
    for before, after in itertools.pairwise(raws):
        assert after.startswith(prefix_before_latest(before))


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda e: AnthropicModel("c", extra_body=e), "messages"),
        (lambda e: AnthropicModel("c", extra_body=e), "system"),
        (lambda e: OpenAIModel("g", extra_body=e), "tools"),
        (lambda e: OpenAIResponsesModel("g", extra_body=e), "store"),
        (lambda e: OpenAIResponsesModel("g", extra_body=e), "input"),
    ],
)
def test_a_field_fxdurable_writes_is_refused_at_construction(make: Any, field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"extra_body may not set {field}"):
        make({field: "x"})


def test_what_is_not_json_is_refused_and_a_later_change_does_not_reach_requests() -> None:
    with pytest.raises(ConfigurationError, match="extra_body must be JSON"):
        OpenAIModel("g", extra_body={"seed": object()})
    given = {"reasoning_effort": "low"}
    model = OpenAIModel("g", extra_body=given)
    given["reasoning_effort"] = "high"
    assert model._extra_body == {"reasoning_effort": "low"}


def test_the_first_log_line_names_the_fields_never_their_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = fx.Agent("a", AnthropicModel("c", extra_body={"metadata": {"user_id": "s3cr3t"}}))
    with caplog.at_level(logging.INFO):
        line = announce_model_endpoints([agent], process="test")
    assert "extra_body: metadata" in line
    assert "s3cr3t" not in line
