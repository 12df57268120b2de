"""OpenAI-compatible streaming through the real client: every quirk real servers have."""

from __future__ import annotations

import json

import httpx
import pytest
from models_support import (
    FakeProvider,
    Reply,
    all_parts,
    collect,
    elapsed,
    request,
    run,
    sse_data,
)
from provider_fixtures import (
    OPENAI_CONTEXT_ERROR_AFTER_200,
    OPENAI_ERROR_AFTER_200,
    OPENAI_ERROR_EVENT_AFTER_200,
    OPENAI_PARALLEL_TOOLS,
    OPENAI_TEXT,
    first_events,
)

from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.errors import ContextLengthError, ModelError, ModelRetryableError
from fxdurable.runtime.models import OpenAIModel
from fxdurable.runtime.models.base import Finish, TextDelta


def model(provider: FakeProvider, **kwargs) -> OpenAIModel:
    kwargs.setdefault("finish_grace_s", 0.2)
    return OpenAIModel(
        "gpt-4o", base_url="http://llm.test/v1", transport=provider.transport, **kwargs
    )


def chunk(delta=None, *, finish=None, index=0):
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "choices": [{"index": index, "delta": delta or {}, "finish_reason": finish}],
    }


def tool_fragment(index, arguments, *, id_=None, name=None):
    fragment: dict = {"index": index, "function": {"arguments": arguments}}
    if id_ is not None:
        fragment["id"] = id_
        fragment["type"] = "function"
    if name is not None:
        fragment["function"]["name"] = name
    return chunk({"tool_calls": [fragment]})


USAGE = {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}


def test_text_deltas_and_usage_after_finish():
    provider = FakeProvider(Reply(OPENAI_TEXT))
    deltas, response = run(collect(model(provider), request()))
    assert deltas == ["Hello", ", wörld", "!"]
    assert response.text == "Hello, wörld!"
    assert response.tool_calls == ()
    assert response.usage == Usage(input_tokens=12, output_tokens=4)
    assert provider.streams[0].closed


def test_exactly_one_finish_and_it_is_last():
    parts = run(all_parts(model(FakeProvider(Reply(OPENAI_TEXT))), request()))
    assert [type(p) for p in parts] == [TextDelta, TextDelta, TextDelta, Finish]


def test_parallel_tool_calls_interleaved_by_index_and_pretty_printed():
    provider = FakeProvider(Reply(OPENAI_PARALLEL_TOOLS))
    deltas, response = run(collect(model(provider), request()))
    assert deltas == []
    assert response.tool_calls == (
        ToolCallRequest(name="get_weather", arguments='{"city": "Paris"}', provider_id="call_A"),
        ToolCallRequest(
            name="get_time",
            arguments='{\n  "zone": "UTC",\n  "hours": [\n    1,\n    2\n  ]\n}',
            provider_id="call_B",
        ),
    )
    assert response.usage == Usage(input_tokens=80, output_tokens=30)


def test_arguments_split_into_one_character_fragments():
    arguments = json.dumps({"path": "src/main.py", "pattern": "def \\w+\\(", "n": [1, 2]}, indent=4)
    body = sse_data(
        tool_fragment(0, "", id_="call_1", name="grep_files"),
        *(tool_fragment(0, ch) for ch in arguments),
        chunk(finish="tool_calls"),
        USAGE,
        "[DONE]",
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    (call,) = response.tool_calls
    assert call.name == "grep_files"
    assert call.arguments == arguments  # byte for byte, as the model produced it


@pytest.mark.parametrize("size", [1, 3, 64])
def test_byte_chunks_do_not_change_the_result(size):
    expected = run(collect(model(FakeProvider(Reply(OPENAI_PARALLEL_TOOLS))), request()))
    got = run(collect(model(FakeProvider(Reply(OPENAI_PARALLEL_TOOLS, chunk=size))), request()))
    assert got == expected
    text_deltas, text = run(collect(model(FakeProvider(Reply(OPENAI_TEXT, chunk=size))), request()))
    assert "".join(text_deltas) == text.text == "Hello, wörld!"


def test_crlf_line_endings():
    body = OPENAI_TEXT.replace("\n", "\r\n")
    _, response = run(collect(model(FakeProvider(Reply(body, chunk=1))), request()))
    assert response.text == "Hello, wörld!"
    assert response.usage == Usage(input_tokens=12, output_tokens=4)


def test_invalid_and_empty_arguments():
    body = sse_data(
        tool_fragment(0, '{"city": "Par', id_="call_1", name="get_weather"),
        tool_fragment(1, "", id_="call_2", name="list_cities"),
        tool_fragment(2, '"{\\"x\\": 1}"', id_="call_3", name="twice_encoded"),
        chunk(finish="length"),
        "[DONE]",
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert [c.arguments for c in response.tool_calls] == ['{"city": "Par', "", '"{\\"x\\": 1}"']


def test_ids_repeated_missing_or_duplicated_are_not_trusted():
    body = sse_data(
        # the id repeated on every fragment of call 0
        tool_fragment(0, '{"a":', id_="call_X", name="one"),
        tool_fragment(0, "1}", id_="call_X"),
        # call 1 reuses call 0's id; call 2 has none at all
        tool_fragment(1, "{}", id_="call_X", name="two"),
        tool_fragment(2, "{}", name="three"),
        chunk(finish="tool_calls"),
        "[DONE]",
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert [(c.name, c.arguments, c.provider_id) for c in response.tool_calls] == [
        ("one", '{"a":1}', "call_X"),
        ("two", "{}", None),
        ("three", "{}", None),
    ]


def test_fragments_without_index():
    body = sse_data(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "one", "arguments": "{"}}]}),
        chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "two", "arguments": "{}"}}]}),
        chunk(finish="tool_calls"),
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert [(c.name, c.provider_id) for c in response.tool_calls] == [("one", "a"), ("two", "b")]


def test_text_and_tool_calls_together():
    body = sse_data(
        chunk({"content": "Let me look."}),
        tool_fragment(0, '{"city":"Oslo"}', id_="call_1", name="get_weather"),
        chunk(finish="tool_calls"),
        USAGE,
    )
    deltas, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert deltas == ["Let me look."]
    assert response.text == "Let me look."
    assert response.tool_calls[0].arguments == '{"city":"Oslo"}'


def test_stream_open_after_finish_returns_within_the_grace():
    # finish, then nothing: no usage, no [DONE], no close
    provider = FakeProvider(Reply(first_events(OPENAI_TEXT, 5), hang=True))
    (_, response), took = elapsed(
        lambda: run(collect(model(provider, finish_grace_s=0.2), request()))
    )
    assert response.text == "Hello, wörld!"
    assert response.usage == Usage()
    assert 0.15 < took < 2.0
    assert provider.streams[0].closed


def test_usage_after_finish_then_open_returns_at_once():
    # the usage chunk is all that was waited for: no [DONE] and no close needed
    provider = FakeProvider(Reply(first_events(OPENAI_TEXT, 6), hang=True))
    (_, response), took = elapsed(
        lambda: run(collect(model(provider, finish_grace_s=30), request()))
    )
    assert response.usage == Usage(input_tokens=12, output_tokens=4)
    assert took < 2.0


def test_usage_in_the_finish_chunk_needs_no_wait():
    final = chunk({"content": "ok"}, finish="stop") | {"usage": USAGE["usage"]}
    provider = FakeProvider(Reply(sse_data(final), hang=True))
    (_, response), took = elapsed(
        lambda: run(collect(model(provider, finish_grace_s=30), request()))
    )
    assert (response.text, response.usage) == ("ok", Usage(input_tokens=5, output_tokens=2))
    assert took < 2.0


def test_partial_usage_before_finish_is_replaced_by_the_final_one():
    early = chunk({"content": "x"}) | {"usage": {"prompt_tokens": 5, "completion_tokens": 0}}
    body = sse_data(
        early, chunk(finish="stop"), USAGE | {"usage": {"prompt_tokens": 5, "completion_tokens": 9}}
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert response.usage == Usage(input_tokens=5, output_tokens=9)


def test_stream_without_done():
    body = first_events(OPENAI_TEXT, 6)  # usage, then the connection closes
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert response.usage == Usage(input_tokens=12, output_tokens=4)


def test_noise_after_finish_is_ignored():
    body = first_events(OPENAI_TEXT, 5) + sse_data(chunk({"content": "late"}), "not json")
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert response.text == "Hello, wörld!"


def test_connection_broken_after_finish_still_finishes():
    body = first_events(OPENAI_TEXT, 5)
    provider = FakeProvider(Reply(body, fail=httpx.RemoteProtocolError("peer closed connection")))
    _, response = run(collect(model(provider), request()))
    assert response.text == "Hello, wörld!"


def test_an_empty_200_is_retryable():
    with pytest.raises(ModelRetryableError, match="finish"):
        run(collect(model(FakeProvider(Reply(""))), request()))


def test_connection_broken_before_finish_is_retryable():
    provider = FakeProvider(
        Reply(
            first_events(OPENAI_TEXT, 3), fail=httpx.RemoteProtocolError("incomplete chunked read")
        )
    )
    with pytest.raises(ModelRetryableError, match=r"connection .* broke"):
        run(collect(model(provider), request()))


@pytest.mark.parametrize("body", [OPENAI_ERROR_AFTER_200, OPENAI_ERROR_EVENT_AFTER_200])
def test_error_after_200_is_retryable(body):
    with pytest.raises(ModelRetryableError, match="mid-stream") as info:
        run(collect(model(FakeProvider(Reply(body))), request()))
    assert "server had an error" in str(info.value) or "upstream overloaded" in str(info.value)


def test_context_length_error_after_200():
    with pytest.raises(ContextLengthError, match="maximum context length"):
        run(collect(model(FakeProvider(Reply(OPENAI_CONTEXT_ERROR_AFTER_200))), request()))


def test_malformed_event_is_a_model_error_not_retried():
    with pytest.raises(ModelError, match="malformed") as info:
        run(collect(model(FakeProvider(Reply("data: {not json\n\n"))), request()))
    assert not isinstance(info.value, ModelRetryableError)


def test_json_error_body_with_200_status():
    # a proxy that answers 200 with a JSON error instead of a stream
    body = json.dumps({"error": {"message": "upstream connect error", "type": "server_error"}})
    provider = FakeProvider(Reply(body, content_type="application/json"))
    with pytest.raises(ModelRetryableError, match="upstream connect error"):
        run(collect(model(provider), request()))


def test_keep_alive_comments_and_empty_data_are_skipped():
    body = ": keep-alive\n\n" + "data:\n\n" + OPENAI_TEXT
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert response.text == "Hello, wörld!"


def test_other_choices_and_refusals():
    body = sse_data(
        chunk({"content": "other"}, index=1),
        chunk({"refusal": "I can't help with that."}),
        chunk(finish="stop"),
    )
    _, response = run(collect(model(FakeProvider(Reply(body))), request()))
    assert response.text == "I can't help with that."


def test_abandoning_the_stream_mid_way_closes_the_response():
    provider = FakeProvider(Reply(OPENAI_TEXT, hang=True))

    async def main():
        stream = model(provider).stream(request())
        first = await anext(stream)
        await stream.aclose()
        return first

    assert run(main()) == TextDelta("Hello")
    assert provider.streams[0].closed


def test_server_that_ignores_stream_true():
    completion = {
        "id": "c",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Sure.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {
                                "name": "get_weather",
                                "arguments": '{\n "city": "Rome"\n}',
                            },
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3},
    }
    provider = FakeProvider(Reply(json.dumps(completion), content_type="application/json"))
    deltas, response = run(collect(model(provider), request()))
    assert deltas == ["Sure."]
    assert response.tool_calls == (
        ToolCallRequest(
            name="get_weather", arguments='{\n "city": "Rome"\n}', provider_id="call_1"
        ),
    )
    assert response.usage == Usage(input_tokens=9, output_tokens=3)
