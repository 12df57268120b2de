"""Anthropic Messages streaming through the real client."""

from __future__ import annotations

import json

import httpx
import pytest
from models_support import FakeProvider, Reply, all_parts, collect, elapsed, request, run
from provider_fixtures import (
    ANTHROPIC_OVERLOADED_AFTER_200,
    ANTHROPIC_PROMPT_TOO_LONG_AFTER_200,
    ANTHROPIC_TEXT,
    ANTHROPIC_TEXT_STOP,
    ANTHROPIC_TOOL_USE,
    first_events,
)

from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.errors import ContextLengthError, ModelError, ModelRetryableError
from fxdurable.runtime.models import AnthropicModel
from fxdurable.runtime.models.base import Finish, TextDelta


def model(provider: FakeProvider, **kwargs) -> AnthropicModel:
    kwargs.setdefault("finish_grace_s", 0.2)
    return AnthropicModel(
        "claude-sonnet-4-5", base_url="http://llm.test", transport=provider.transport, **kwargs
    )


# The arguments as the model streamed them, byte for byte (pretty-printed; empty for a call
# whose input had no deltas).
EXPECTED_CALLS = (
    ToolCallRequest(
        name="get_weather",
        arguments='{\n  "city": "San Francisco"\n}',
        provider_id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
    ),
    ToolCallRequest(name="get_time", arguments="", provider_id="toolu_02"),
)


def test_text_tool_use_fragments_and_pings():
    provider = FakeProvider(Reply(ANTHROPIC_TOOL_USE))
    deltas, response = run(collect(model(provider), request()))
    assert deltas == ["Okay, let", "'s check."]
    assert response.text == "Okay, let's check."
    assert response.tool_calls == EXPECTED_CALLS
    assert response.usage == Usage(input_tokens=472, output_tokens=89)
    assert provider.streams[0].closed
    assert provider.requests[0].url == "http://llm.test/v1/messages"


def test_exactly_one_finish_and_it_is_last():
    parts = run(all_parts(model(FakeProvider(Reply(ANTHROPIC_TOOL_USE))), request()))
    assert [type(p) for p in parts] == [TextDelta, TextDelta, Finish]


@pytest.mark.parametrize("size", [1, 2, 7])
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_chunking_and_line_endings_do_not_change_the_result(size, eol):
    body = ANTHROPIC_TOOL_USE.replace("\n", eol)
    _, response = run(collect(model(FakeProvider(Reply(body, chunk=size))), request()))
    assert response.tool_calls == EXPECTED_CALLS
    assert response.text == "Okay, let's check."


def test_cached_input_tokens_count_as_input_and_are_recorded_apart():
    body = ANTHROPIC_TEXT + ANTHROPIC_TEXT_STOP
    deltas, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert deltas == ["Hello", " there"]
    # input_tokens is uncached + written + read, as the API splits them; the parts are kept.
    assert response.usage == Usage(
        input_tokens=1110, output_tokens=7, cache_read_tokens=1000, cache_creation_tokens=100
    )


def test_stop_reason_then_open_returns_within_the_grace():
    # message_delta with stop_reason, then no message_stop and no close
    provider = FakeProvider(Reply(ANTHROPIC_TEXT, hang=True))
    (_, response), took = elapsed(
        lambda: run(collect(model(provider, finish_grace_s=0.2), request()))
    )
    assert response.text == "Hello there"
    assert response.usage.output_tokens == 7
    assert 0.15 < took < 2.0
    assert provider.streams[0].closed


def test_message_stop_then_open_returns_at_once():
    provider = FakeProvider(Reply(ANTHROPIC_TEXT + ANTHROPIC_TEXT_STOP, hang=True))
    (_, response), took = elapsed(
        lambda: run(collect(model(provider, finish_grace_s=30), request()))
    )
    assert response.text == "Hello there"
    assert took < 2.0


def test_stop_reason_then_close_without_message_stop():
    _, response = run(collect(model(FakeProvider(Reply(ANTHROPIC_TEXT))), request()))
    assert response.text == "Hello there"


def test_broken_connection_after_stop_reason_still_finishes():
    provider = FakeProvider(Reply(ANTHROPIC_TEXT, fail=httpx.ReadError("connection reset")))
    _, response = run(collect(model(provider), request()))
    assert response.text == "Hello there"


def test_no_stop_is_retryable():
    # closed before message_delta: the Messages API always sends it, so this is a cut
    body = first_events(ANTHROPIC_TEXT, 5)
    with pytest.raises(ModelRetryableError, match="before the response finished"):
        run(collect(model(FakeProvider(Reply(body))), request()))


def test_overloaded_error_after_200_is_retryable():
    with pytest.raises(ModelRetryableError, match=r"overloaded_error.*Overloaded"):
        run(collect(model(FakeProvider(Reply(ANTHROPIC_OVERLOADED_AFTER_200))), request()))


def test_prompt_too_long_after_200_is_a_context_length_error():
    with pytest.raises(ContextLengthError, match="prompt is too long"):
        run(collect(model(FakeProvider(Reply(ANTHROPIC_PROMPT_TOO_LONG_AFTER_200))), request()))


def test_malformed_event_is_a_model_error():
    body = "event: content_block_delta\ndata: {oops\n\n"
    with pytest.raises(ModelError, match="malformed") as info:
        run(collect(model(FakeProvider(Reply(body))), request()))
    assert not isinstance(info.value, ModelRetryableError)


def test_unknown_events_and_thinking_are_ignored():
    body = (
        first_events(ANTHROPIC_TEXT, 1)
        + 'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"thinking","thinking":""}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"thinking_delta","thinking":"hmm"}}\n\n'
        'event: brand_new\ndata: {"type":"brand_new"}\n\n'
        'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        '"content_block":{"type":"text","text":"Hi"}}\n\n'
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        '"usage":{"output_tokens":3}}\n\n' + ANTHROPIC_TEXT_STOP
    )
    deltas, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert deltas == ["Hi"]
    assert response.text == "Hi"


def test_invalid_tool_input_is_kept_raw():
    body = (
        first_events(ANTHROPIC_TEXT, 1)
        + 'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"tool_use","id":"toolu_9","name":"edit_file","input":{}}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"input_json_delta","partial_json":"{\\"path\\": \\"a.py"}}\n\n'
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},'
        '"usage":{"output_tokens":4096}}\n\n' + ANTHROPIC_TEXT_STOP
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert response.tool_calls == (
        ToolCallRequest(name="edit_file", arguments='{"path": "a.py', provider_id="toolu_9"),
    )


def test_server_that_ignores_stream_true():
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Sure."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 9, "output_tokens": 3},
    }
    provider = FakeProvider(Reply(json.dumps(message), content_type="application/json"))
    deltas, response = run(collect(model(provider), request()))
    assert deltas == ["Sure."]
    assert response.tool_calls == (
        ToolCallRequest(name="get_weather", arguments='{"city":"Rome"}', provider_id="toolu_1"),
    )
    assert response.usage == Usage(input_tokens=9, output_tokens=3)
    assert (response.stop_reason, response.stop_inferred) == ("tool_use", False)


def test_a_whole_message_without_a_stop_reason_has_it_inferred():
    message = {"type": "message", "content": [{"type": "text", "text": "Hi."}]}
    provider = FakeProvider(Reply(json.dumps(message), content_type="application/json"))
    _, response = run(collect(model(provider), request()))
    assert (response.text, response.stop_reason, response.stop_inferred) == (
        "Hi.",
        "end_turn",
        True,
    )
