"""Typed final answers on the wire: each provider's native structured output in the request,
and a whole typed turn through the real httpx client against the scripted server."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from models_support import collect
from provider_e2e_support import PROVIDERS, point_at, run, runtime

import fxdurable as fx
from fxdurable.core.records import MessageContent
from fxdurable.errors import ModelError
from fxdurable.runtime.models import AnthropicModel
from fxdurable.runtime.models.anthropic import build_anthropic_body
from fxdurable.runtime.models.base import (
    INTERRUPTED_NOTE,
    ChatMessage,
    ModelRequest,
    ModelResponse,
)
from fxdurable.runtime.models.openai import build_openai_body
from fxdurable.runtime.models.openai_responses import build_responses_body
from fxdurable.runtime.output import OutputSpec
from fxdurable.testing.model_server import Quirks, ScriptedModelServer


class Rating(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    score: int
    reason: str


class Loose(pydantic.BaseModel):
    title: str
    tags: list[str] = []


def asking(output_type: object) -> ModelRequest:
    return ModelRequest(
        instructions="Be brief.",
        messages=[ChatMessage(role="user", text="rate it")],
        output=OutputSpec(output_type).format,
    )


def test_openai_chat_sends_a_json_schema_response_format() -> None:
    body = build_openai_body("gpt-x", asking(Rating))
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Rating", "schema": Rating.model_json_schema(), "strict": True},
    }
    loose = build_openai_body("gpt-x", asking(Loose))["response_format"]["json_schema"]
    assert loose["strict"] is False, "strict mode would refuse a schema with optional fields"


def test_the_responses_api_sends_text_format() -> None:
    body = build_responses_body("gpt-x", asking(Rating))
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "Rating",
            "schema": Rating.model_json_schema(),
            "strict": True,
        }
    }


def test_anthropic_sends_output_config_for_a_closed_schema_else_describes_it() -> None:
    strict = build_anthropic_body("claude-x", asking(Rating), max_tokens=100)
    assert strict["output_config"] == {
        "format": {"type": "json_schema", "schema": Rating.model_json_schema()}
    }
    assert strict["system"] == "Be brief."
    loose = build_anthropic_body("claude-x", asking(Loose), max_tokens=100)
    assert "output_config" not in loose
    assert loose["system"].startswith("Be brief.\n\nYour final answer")
    assert (
        json.dumps(Loose.model_json_schema(), separators=(",", ":"), sort_keys=True)
        in (loose["system"])
    )


class Bounded(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    score: int = pydantic.Field(ge=0, le=10)


def test_anthropic_describes_a_closed_schema_with_constraints_it_refuses() -> None:
    request = asking(Bounded)
    assert request.output is not None and request.output.strict
    body = build_anthropic_body("claude-x", request, max_tokens=100)
    assert "output_config" not in body and '"maximum":10' in body["system"]
    assert build_openai_body("gpt-x", request)["response_format"]["json_schema"]["strict"]


def test_no_output_type_sends_none_of_it() -> None:
    request = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
    assert "response_format" not in build_openai_body("gpt-x", request)
    assert "text" not in build_responses_body("gpt-x", request)
    assert "output_config" not in build_anthropic_body("claude-x", request, max_tokens=10)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_typed_turn_over_http_rejects_then_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    def policy(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].text.startswith("[Your final answer was rejected"):
            return ModelResponse(text='{"score": 9, "reason": "fine"}')
        return ModelResponse(text='{"score": "nine"}')

    with ScriptedModelServer(policy, quirks=Quirks(text_chunk_chars=3, chunk_bytes=5)) as server:
        agent = fx.Agent("a", point_at(monkeypatch, provider, server), output_type=Rating)

        async def go() -> fx.Submission:
            async with runtime(tmp_path, [agent]) as rt:
                s = rt.session("s")
                return await s.wait((await s.submit("rate it")).id, timeout=8)

        sub = run(go())
    assert sub.output == Rating(score=9, reason="fine"), sub.error
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 2 and all(r.status == 200 for r in server.requests)
    if provider == "openai":
        assert all(b["response_format"]["json_schema"]["name"] == "Rating" for b in bodies)
    else:
        assert all("output_config" in b for b in bodies)


def test_a_continuation_without_its_container_is_refused_as_the_api_does() -> None:
    """The negative control of the paused-turn tests: the server checks the container."""

    def paused(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "assistant":
            return ModelResponse(text=" done")
        return ModelResponse(text="Searching.", stop_reason="pause_turn")

    with ScriptedModelServer(paused) as server:
        model = AnthropicModel("claude-x", base_url=server.anthropic_base_url, api_key="k")
        first = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="go")])
        _, response = run(collect(model, first))
        assert response.stop_reason == "pause_turn" and response.content is not None
        assert (response.content.container or "").startswith("container_")
        back = ChatMessage(role="assistant", text=response.text, content=response.content)
        _, done = run(
            collect(model, ModelRequest(instructions="", messages=[*first.messages, back]))
        )
        assert done.text == " done"
        assert server.requests[1].body["container"] == response.content.container
        stripped = ChatMessage(
            role="assistant",
            text=response.text,
            content=type(response.content)(
                wire=response.content.wire, parts=response.content.parts, container=None
            ),
        )
        with pytest.raises(ModelError, match="container"):
            run(collect(model, ModelRequest(instructions="", messages=[*first.messages, stripped])))
    assert [r.status for r in server.requests] == [200, 200, 400]


def test_the_container_is_named_again_after_a_cut_reply_but_not_in_the_next_turn() -> None:
    paused = ChatMessage(
        role="assistant",
        text="Searching.",
        content=MessageContent(
            wire="anthropic", parts=({"type": "text", "text": "x"},), container="c1"
        ),
    )
    cut = ChatMessage(role="assistant", text="Sti", interrupted=True)
    turn = [
        ChatMessage(role="user", text="go"),
        paused,
        cut,
        ChatMessage(role="user", text=INTERRUPTED_NOTE),
    ]
    body = build_anthropic_body(
        "claude-x", ModelRequest(instructions="", messages=turn), max_tokens=10
    )
    assert body["container"] == "c1", "a note the runtime added does not end the turn"
    later = [
        *turn,
        ChatMessage(role="assistant", text="Done."),
        ChatMessage(role="user", text="next"),
    ]
    body = build_anthropic_body(
        "claude-x", ModelRequest(instructions="", messages=later), max_tokens=10
    )
    assert "container" not in body
