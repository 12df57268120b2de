"""Reasoning across a tool call, and paused turns, end to end: a real Runtime and the real
httpx client against the scripted wire server, which checks each follow-up request the way
the provider does (``Quirks(reasoning=True)``): Anthropic refuses a last assistant turn with
``tool_use`` whose thinking is missing or altered, DeepSeek one whose ``reasoning_content``
is missing, Gemini a call without its thought signature, and Anthropic a paused turn's
``server_tool_use`` sent back without its result.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pydantic
import pytest
from models_support import collect
from provider_e2e_support import PROVIDERS, of_type, point_at, run, runtime

import fxdurable as fx
from fxdurable.errors import ModelError
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse
from fxdurable.testing.model_server import Quirks, ScriptedModelServer
from fxdurable.testing.wire_common import reasoning_for

QUIRKS = Quirks(reasoning=True, text_chunk_chars=3, split_arguments=2, chunk_bytes=7)


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Query(pydantic.BaseModel):
    q: str


@fx.tool(name="lookup")
def lookup(inp: Query, ctx: fx.ToolContext) -> str:
    """Look something up."""
    return f"found {inp.q}"


def tool_then_answer(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].role == "tool":
        return ModelResponse(text="The answer is 42.")
    return ModelResponse(
        text="Let me look.",
        tool_calls=(fx.ToolCallRequest(name="lookup", arguments='{"q": "life"}'),),
    )


def reasoning_sent(provider: str, body: dict) -> list[str]:
    """The reasoning each assistant message with calls carries in a request body."""
    out = []
    for message in body["messages"]:
        if message["role"] != "assistant":
            continue
        if provider == "openai":
            if message.get("tool_calls"):
                out.append(message["reasoning_content"])
        else:
            out += [b["thinking"] for b in message["content"] if b["type"] == "thinking"]
    return out


def test_reasoning_goes_back_with_the_tool_call_and_never_into_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    with ScriptedModelServer(tool_then_answer, quirks=QUIRKS) as server:
        model = point_at(monkeypatch, provider, server)
        agent = fx.Agent("a", model, tools=[lookup])

        async def go():
            async with runtime(tmp_path, [agent]) as rt:
                s = rt.session("a")
                answer = await s.run("What is it?", timeout=8)
                return answer, await s.events()

        answer, events = run(go())

    assert [r.status for r in server.requests] == [200, 200], [r.error for r in server.requests]
    call_id = server.requests[0].response.tool_calls[0].provider_id
    expected = reasoning_for([call_id])
    assert reasoning_sent(provider, server.requests[1].body) == [expected]
    assert answer == "The answer is 42."
    texts = [e.data["text"] for e in of_type(events, "model.completed")]
    assert texts == ["Let me look.", "The answer is 42."], "thinking is never answer text"
    # It is shown apart, collapsed (the console's "Thinking", the trace's size): in
    # model.completed's own ``thinking`` field, with the pieces there is nothing to read
    # of counted (Anthropic's redacted block), and in no other field of any line.
    first = of_type(events, "model.completed")[0].data
    assert first["thinking"] == expected
    assert first.get("thinking_hidden") == (1 if provider == "anthropic" else None)
    elsewhere = [
        {k: v for k, v in e.data.items() if not (e.type == "model.completed" and k == "thinking")}
        for e in events
    ]
    assert "naïve" not in json.dumps(elsewhere, ensure_ascii=False)


def dropped(provider: str, server: ScriptedModelServer, *, alter: bool) -> ModelError:
    """The follow-up a client that drops (or alters) the reasoning would send, through the
    real client: the provider's 400."""
    first = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
    model: OpenAIModel | AnthropicModel
    if provider == "openai":
        model = OpenAIModel("deepseek-x", base_url=server.openai_base_url)
    else:
        model = AnthropicModel("claude-x", base_url=server.anthropic_base_url)
    _, response = run(collect(model, first))
    (call,) = response.tool_calls
    if not alter:
        call = replace(call, wire=None, parts=())
    elif provider == "openai":
        call = replace(call, parts=({**call.parts[0], "message": {"reasoning_content": "Other."}},))
    else:
        thinking = {**call.parts[0], "thinking": call.parts[0]["thinking"] + " (edited)"}
        call = replace(call, parts=(thinking, *call.parts[1:]))
    calls = (call,)
    follow = ModelRequest(
        instructions="",
        messages=[
            ChatMessage(role="user", text="hi"),
            ChatMessage(role="assistant", text=response.text, tool_calls=calls),
            ChatMessage(role="tool", text="found life", tool_call_id=calls[0].provider_id),
        ],
    )
    with pytest.raises(ModelError) as caught:
        run(collect(model, follow))
    return caught.value


@pytest.mark.parametrize("alter", [False, True], ids=["missing", "altered"])
def test_the_server_refuses_a_follow_up_without_the_reasoning_as_the_provider_does(
    provider: str, alter: bool
) -> None:
    """The negative control: the check that makes the test above mean something."""
    with ScriptedModelServer(tool_then_answer, quirks=QUIRKS) as server:
        error = dropped(provider, server, alter=alter)
    assert [r.status for r in server.requests] == [200, 400]
    if provider == "openai":
        assert "The reasoning_content in the thinking mode must be passed back" in str(error)
    elif alter:
        assert "Invalid `signature` in `thinking` block" in str(error)
    else:
        assert "a final `assistant` message must start with a thinking block" in str(error)


def paused_then(final: ModelResponse):
    def policy(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "assistant":  # the paused turn, sent back: the model goes on
            return final
        if last.role == "tool":
            return ModelResponse(text="Saved.")
        return ModelResponse(text="Searching.", stop_reason="pause_turn")

    return policy


@pytest.mark.parametrize("then_call", [False, True], ids=["answer", "client-tool"])
def test_a_paused_turn_is_continued_and_its_server_tool_blocks_stay_in_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then_call: bool
) -> None:
    final = (
        ModelResponse(
            text=" Found it.",
            tool_calls=(fx.ToolCallRequest(name="lookup", arguments='{"q": "it"}'),),
        )
        if then_call
        else ModelResponse(text=" Found it.")
    )
    with ScriptedModelServer(paused_then(final), quirks=QUIRKS) as server:
        agent = fx.Agent("a", point_at(monkeypatch, "anthropic", server), tools=[lookup])

        async def go():
            async with runtime(tmp_path, [agent]) as rt:
                s = rt.session("a")
                answer = await s.run("Search it.", timeout=8)
                calls = rt.journal.read(
                    lambda v: [c for sub in v.submissions("a") for c in v.model_calls(sub.id)]
                )
                tasks = rt.journal.read(lambda v: v.session_tool_tasks("a"))
                return answer, calls, tasks

        answer, calls, tasks = run(go())

    statuses = [r.status for r in server.requests]
    assert statuses == [200] * (3 if then_call else 2), [r.error for r in server.requests]
    continued = server.requests[1].body["messages"][-1]
    assert continued["role"] == "assistant"
    kinds = [b["type"] for b in continued["content"]]
    assert kinds == [
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "text",
    ]
    # The pause is a recorded step of its own, and the continuation the next round: each
    # model call with the usage its request reported, so the turn's totals count both.
    first, continued_call = calls[0], calls[1]
    assert (first.round, first.stop_reason) == (0, "pause_turn"), "a pause is not the answer"
    assert continued_call.round == 1 and continued_call.stop_reason != "pause_turn"
    paused_usage = server.requests[0].response.usage
    assert first.usage.output_tokens == paused_usage.output_tokens
    assert continued_call.usage.output_tokens == server.requests[1].response.usage.output_tokens
    assert [t.tool for t in tasks] == (["lookup"] if then_call else []), "no server tool runs here"
    if then_call:
        # After the client tool, the whole turn goes back: the server tool's blocks with it.
        history = server.requests[2].body["messages"][1]["content"]
        assert [b["type"] for b in history].count("web_search_tool_result") == 1
        assert answer == "Saved."
    else:
        assert answer == "Searching. Found it."
