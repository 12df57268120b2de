"""What the clients send: URLs, headers, and request bodies built from a ModelRequest."""

from __future__ import annotations

import pytest
from models_support import SECRET, FakeProvider, Reply, collect, request, run
from provider_fixtures import ANTHROPIC_TOOL_USE, OPENAI_TEXT

from fxdurable.core.records import ToolCallRequest
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.models import AnthropicModel, OpenAIModel, Timeouts
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ToolSpec

LONG_ID = "turn-0123456789abcdef0123/r12/t3-with-a-long-suffix"

CONVERSATION = [
    ChatMessage(role="user", text="What is the weather in Paris and the time in UTC?"),
    ChatMessage(
        role="assistant",
        text="Checking.",
        tool_calls=(
            ToolCallRequest(name="get_weather", arguments='{"city":"Paris"}', provider_id="call_1"),
            ToolCallRequest(name="get_time", arguments='{"zone":"UTC"}', provider_id=LONG_ID),
        ),
    ),
    ChatMessage(role="tool", text="18C", tool_call_id="call_1", tool_name="get_weather"),
    ChatMessage(role="tool", text="12:00", tool_call_id=LONG_ID, tool_name="get_time"),
    ChatMessage(
        role="assistant", text="", tool_calls=(ToolCallRequest(name="noop", arguments="{"),)
    ),
    ChatMessage(role="tool", text="", tool_call_id=None, tool_name="noop"),
    ChatMessage(role="assistant", text="18C and noon."),
    ChatMessage(role="user", text="Thanks"),
]
TOOLS = [ToolSpec(name="get_weather", description="Weather", parameters={"type": "object"})]


def test_openai_request(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    provider = FakeProvider(Reply(OPENAI_TEXT))
    model = OpenAIModel(
        "gpt-4o", base_url="http://llm.test/v1/", transport=provider.transport, max_tokens=256
    )
    run(collect(model, ModelRequest(instructions="Be brief.", messages=CONVERSATION, tools=TOOLS)))
    (sent,) = provider.requests
    assert sent.method == "POST"
    assert str(sent.url) == "http://llm.test/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "text/event-stream"
    body = provider.bodies[0]
    long_id = body["messages"][2]["tool_calls"][1]["id"]
    assert len(long_id) <= 40 and long_id.startswith("call_")
    assert body == {
        "model": "gpt-4o",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 256,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather",
                    "parameters": {"type": "object"},
                },
            }
        ],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather in Paris and the time in UTC?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": long_id,
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"zone":"UTC"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "tool", "tool_call_id": long_id, "content": "12:00"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "fxd_call_1",
                        "type": "function",
                        "function": {"name": "noop", "arguments": "{"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "fxd_call_1", "content": ""},
            {"role": "assistant", "content": "18C and noon."},
            {"role": "user", "content": "Thanks"},
        ],
    }


def test_openai_without_key_or_tools_sends_no_authorization(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("FXD_OPENAI_BASE_URL", "http://ollama.test:11434/v1")
    provider = FakeProvider(Reply(OPENAI_TEXT))
    model = OpenAIModel("llama3", transport=provider.transport)
    run(
        collect(
            model, ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
        )
    )
    (sent,) = provider.requests
    assert str(sent.url) == "http://ollama.test:11434/v1/chat/completions"
    assert "authorization" not in sent.headers
    body = provider.bodies[0]
    assert "tools" not in body and "max_tokens" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_openai_explicit_key_wins_over_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    provider = FakeProvider(Reply(OPENAI_TEXT))
    run(
        collect(
            OpenAIModel(
                "m", base_url="http://x.test", api_key=SECRET, transport=provider.transport
            ),
            request(),
        )
    )
    assert provider.requests[0].headers["authorization"] == f"Bearer {SECRET}"


def test_anthropic_request(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    provider = FakeProvider(Reply(ANTHROPIC_TOOL_USE))
    model = AnthropicModel(
        "claude-sonnet-4-5",
        base_url="http://llm.test",
        transport=provider.transport,
        max_tokens=1000,
        prompt_cache=False,  # the body as it is without breakpoints (tests/models/test_caching.py)
    )
    run(collect(model, ModelRequest(instructions="Be brief.", messages=CONVERSATION, tools=TOOLS)))
    (sent,) = provider.requests
    assert str(sent.url) == "http://llm.test/v1/messages"
    assert sent.headers["x-api-key"] == SECRET
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    long_id = LONG_ID.replace("/", "_")
    assert provider.bodies[0] == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "stream": True,
        "system": "Be brief.",
        "tools": [
            {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is the weather in Paris and the time in UTC?"}
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": long_id,
                        "name": "get_time",
                        "input": {"zone": "UTC"},
                    },
                ],
            },
            {
                # both results of one assistant message in ONE user message
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                    {"type": "tool_result", "tool_use_id": long_id, "content": "12:00"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "fxd_call_1",
                        "name": "noop",
                        "input": {"_raw_arguments": "{"},
                    }
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "fxd_call_1"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "18C and noon."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
        ],
    }


def test_anthropic_defaults_and_environment(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("FXD_ANTHROPIC_BASE_URL", "http://gateway.test/anthropic/v1")
    provider = FakeProvider(Reply(ANTHROPIC_TOOL_USE))
    model = AnthropicModel("claude-x", transport=provider.transport)
    run(
        collect(
            model, ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
        )
    )
    (sent,) = provider.requests
    assert str(sent.url) == "http://gateway.test/anthropic/v1/messages"
    assert "x-api-key" not in sent.headers
    body = provider.bodies[0]
    assert body["max_tokens"] == 4096
    assert "system" not in body and "tools" not in body


def test_default_base_urls(monkeypatch):
    monkeypatch.delenv("FXD_OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("FXD_ANTHROPIC_BASE_URL", raising=False)
    assert OpenAIModel("gpt-4o").base_url == "https://api.openai.com/v1"
    assert AnthropicModel("claude-x").base_url == "https://api.anthropic.com"
    assert OpenAIModel("gpt-4o").name == "openai/gpt-4o"
    assert AnthropicModel("claude-x").name == "anthropic/claude-x"


def test_constructor_checks_and_timeout_forms():
    with pytest.raises(ConfigurationError, match="model name"):
        OpenAIModel("")
    with pytest.raises(ConfigurationError, match="finish_grace_s"):
        AnthropicModel("claude-x", finish_grace_s=-1)
    assert OpenAIModel("m", timeout=30)._timeouts == Timeouts(total=30.0)
    assert OpenAIModel("m", timeout=Timeouts(read=5))._timeouts.read == 5
