"""Streams as real providers send them, not as the reference API describes them, read by the
real httpx client from a local server (issue 9 §1). The byte streams are written here from the
providers' documentation and from streams users reported:

- OpenAI-compatible servers that never set ``finish_reason`` (Ollama through LiteLLM, some
  vLLM tool parsers, gateways): tool-call deltas, a usage chunk, ``data: [DONE]``.
- OpenAI's ``data: {"error": {...}}`` inside a 200 (no ``choices``), OpenRouter's error chunk
  with ``"finish_reason": "error"`` and the HTTP status in ``error.code``; Anthropic's
  ``event: error`` with ``overloaded_error`` — before or after the finish.
- Anthropic's ``stop_reason: "max_tokens"`` with a tool call's ``input_json_delta`` cut off.
- The terminal event (``[DONE]``, ``message_stop``) with no blank line after it, on a stream
  held open.
"""

from __future__ import annotations

import json

import pytest
from models_support import collect, request, run
from raw_stream_support import (
    HOLD_S,
    RawStreams,
    anthropic_event,
    anthropic_start,
    anthropic_stop,
    anthropic_tool_use,
    openai_chunk,
    openai_tool_fragment,
    openai_usage,
    stream,
)

from fxdurable.core.records import Usage
from fxdurable.errors import ContextLengthError, ModelError, ModelRetryableError
from fxdurable.runtime.model_step import cut_tool_calls
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.runtime.models.base import ModelResponse
from fxdurable.testing.model_server_http import JsonReply, StreamReply

PRETTY = '{\n  "city": "Paris",\n  "days": [\n    1,\n    2\n  ]\n}'


def openai(server: RawStreams, **kwargs: float) -> OpenAIModel:
    # A long grace: a test that passes did not wait for it.
    return OpenAIModel("m", base_url=f"{server.url}/v1", finish_grace_s=kwargs.get("grace", HOLD_S))


def anthropic(server: RawStreams) -> AnthropicModel:
    return AnthropicModel("claude-x", base_url=server.url, finish_grace_s=HOLD_S)


def read(model: OpenAIModel | AnthropicModel) -> ModelResponse:
    return run(collect(model, request()))[1]


def fragments(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- 1. no finish_reason at all --------------------------------------------------------------

NO_FINISH_TOOL_CALL = (
    openai_tool_fragment("", id_="call_1", name="get_weather")
    + "".join(openai_tool_fragment(part) for part in fragments(PRETTY, 5))
    + openai_usage()
    + "data: [DONE]\n\n"
)


@pytest.mark.parametrize("chunk_bytes", [0, 1], ids=["whole", "1-byte"])
def test_tool_call_without_finish_reason_ending_in_done_is_complete(chunk_bytes: int) -> None:
    with RawStreams(stream(NO_FINISH_TOOL_CALL, chunk_bytes=chunk_bytes)) as server:
        response = read(openai(server))
    (call,) = response.tool_calls
    assert (call.name, call.arguments, call.provider_id) == ("get_weather", PRETTY, "call_1")
    assert (response.stop_reason, response.stop_inferred) == ("tool_calls", True)
    assert response.usage == Usage(input_tokens=20, output_tokens=7)
    assert not response.truncated


def test_text_without_finish_reason_ending_in_done_or_a_clean_close_is_complete() -> None:
    text = openai_chunk({"role": "assistant", "content": "Hello"}) + openai_chunk({"content": "!"})
    with RawStreams(stream(text + "data: [DONE]\n\n"), stream(text)) as server:
        done, closed = read(openai(server)), read(openai(server))
    for response in (done, closed):
        assert response.text == "Hello!"
        assert (response.stop_reason, response.stop_inferred) == ("stop", True)


def test_anthropic_message_stop_without_a_stop_reason_has_it_inferred() -> None:
    # A gateway that drops message_delta: message_stop still ends a whole response.
    body = (
        anthropic_start()
        + anthropic_tool_use(0, "toolu_1", "get_weather", PRETTY)
        + anthropic_event({"type": "message_stop"})
    )
    with RawStreams(stream(body, chunk_bytes=1)) as server:
        response = read(anthropic(server))
    assert response.tool_calls[0].arguments == PRETTY
    assert (response.stop_reason, response.stop_inferred) == ("tool_use", True)


def test_a_reported_finish_reason_is_kept_verbatim_and_not_inferred() -> None:
    body = openai_chunk({"content": "Blocked."}) + openai_chunk(finish="content_filter")
    with RawStreams(stream(body + "data: [DONE]\n\n")) as server:
        response = read(openai(server))
    assert (response.stop_reason, response.stop_inferred) == ("content_filter", False)


def test_no_finish_reason_after_half_a_tool_call_is_a_cut_stream() -> None:
    body = openai_tool_fragment('{"city": "Pa', id_="call_1", name="get_weather")
    with (
        RawStreams(stream(body + "data: [DONE]\n\n")) as server,
        pytest.raises(ModelRetryableError, match="in the middle of a tool call"),
    ):
        read(openai(server))


# -- 2. an error object inside a 200 stream --------------------------------------------------

OPENAI_SERVER_ERROR = (
    'data: {"error": {"message": "The server had an error while processing your request. '
    'Sorry about that!", "type": "server_error"}}\n\n'
)
OPENROUTER_ERROR_CHUNK = (
    'data: {"id":"gen-1","object":"chat.completion.chunk","error":{"code":502,"message":'
    '"Provider disconnected"},"choices":[{"index":0,"delta":{"content":""},'
    '"finish_reason":"error"}]}\n\n'
)
INVALID_REQUEST = (
    'data: {"error": {"message": "Invalid schema for function \'get_weather\'", '
    '"type": "invalid_request_error", "param": "tools", "code": null}}\n\n'
)
CONTEXT_ERROR = (
    'data: {"error": {"message": "This model\'s maximum context length is 8192 tokens.", '
    '"type": "invalid_request_error", "code": "context_length_exceeded"}}\n\n'
)
RATE_LIMITED = 'data: {"error": {"code": 429, "message": "Rate limit exceeded: upstream"}}\n\n'
BAD_REQUEST = 'data: {"error": {"code": 400, "message": "Provider returned error: bad"}}\n\n'
PARTIAL = openai_chunk({"content": "Partial"})
FINISHED = openai_chunk({"content": "Done."}) + openai_chunk(finish="stop")


@pytest.mark.parametrize(
    ("body", "error", "said"),
    [
        (PARTIAL + OPENAI_SERVER_ERROR, ModelRetryableError, "server had an error"),
        (FINISHED + OPENAI_SERVER_ERROR, ModelRetryableError, "server had an error"),
        (FINISHED + openai_usage() + OPENAI_SERVER_ERROR + "data: [DONE]\n\n", None, None),
        (PARTIAL + OPENROUTER_ERROR_CHUNK, ModelRetryableError, "Provider disconnected"),
        (PARTIAL + RATE_LIMITED, ModelRetryableError, "Rate limit exceeded"),
        (PARTIAL + BAD_REQUEST, ModelError, "Provider returned error"),
        (FINISHED + "event: error\n" + INVALID_REQUEST, ModelError, "Invalid schema"),
        (INVALID_REQUEST, ModelError, "Invalid schema"),
        (CONTEXT_ERROR, ContextLengthError, "maximum context length"),
    ],
    ids=[
        "openai-before-finish",
        "openai-after-finish",
        "after-usage-is-past-the-response",
        "openrouter-502-chunk",
        "code-429",
        "code-400",
        "event-error-invalid-request",
        "invalid-request",
        "context-length",
    ],
)
def test_an_error_in_a_200_stream_fails_the_call_classified_like_an_http_error(
    body: str, error: type[ModelError] | None, said: str | None
) -> None:
    with RawStreams(stream(body, chunk_bytes=1)) as server:
        if error is None:
            # The response was complete (finish and usage) before the error: nothing read it.
            assert read(openai(server)).text == "Done."
            return
        with pytest.raises(error, match=said) as info:
            read(openai(server))
    permanent = error is not ModelRetryableError
    assert isinstance(info.value, ModelRetryableError) is not permanent


ANTHROPIC_OVERLOADED = anthropic_event(
    {
        "type": "error",
        "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_011",
    }
)
ANTHROPIC_INVALID = anthropic_event(
    {"type": "error", "error": {"type": "invalid_request_error", "message": "tools: bad schema"}}
)
ANTHROPIC_TEXT_BLOCK = anthropic_event(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
) + anthropic_event(
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
)
ANTHROPIC_STOP_REASON = anthropic_event(
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}
)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (anthropic_start() + ANTHROPIC_TEXT_BLOCK + ANTHROPIC_OVERLOADED, ModelRetryableError),
        (
            anthropic_start() + ANTHROPIC_TEXT_BLOCK + ANTHROPIC_STOP_REASON + ANTHROPIC_OVERLOADED,
            ModelRetryableError,
        ),
        (anthropic_start() + ANTHROPIC_INVALID, ModelError),
    ],
    ids=["overloaded-mid-text", "overloaded-after-stop-reason", "invalid-request"],
)
def test_anthropic_error_event_fails_the_call(body: str, error: type[ModelError]) -> None:
    with RawStreams(stream(body, chunk_bytes=1)) as server, pytest.raises(error) as info:
        read(anthropic(server))
    assert isinstance(info.value, ModelRetryableError) is (error is ModelRetryableError)


# -- 3. the stop reason, and truncation ------------------------------------------------------


def test_anthropic_max_tokens_in_the_middle_of_a_tool_input_is_truncated() -> None:
    body = (
        anthropic_start()
        + ANTHROPIC_TEXT_BLOCK
        + anthropic_tool_use(1, "toolu_1", "write_file", '{"path": "a.txt", ', '"text": "lo')
        + anthropic_stop("max_tokens", output_tokens=64)
    )
    with RawStreams(stream(body, chunk_bytes=1)) as server:
        response = read(anthropic(server))
    assert (response.stop_reason, response.stop_inferred, response.truncated) == (
        "max_tokens",
        False,
        True,
    )
    assert response.tool_calls[0].arguments == '{"path": "a.txt", "text": "lo'
    assert cut_tool_calls(response) == ["write_file"]


def test_openai_length_cut_text_is_truncated_and_whole_calls_are_not_cut() -> None:
    body = (
        openai_tool_fragment('{"city": "Oslo"}', id_="c1", name="get_weather")
        + openai_chunk({"content": "and then"})
        + openai_chunk(finish="length")
        + "data: [DONE]\n\n"
    )
    with RawStreams(stream(body)) as server:
        response = read(openai(server))
    assert (response.stop_reason, response.truncated) == ("length", True)
    assert cut_tool_calls(response) == [], "its one call was closed before the cut"


# -- 4. the argument text as the model produced it -------------------------------------------


@pytest.mark.parametrize("size", [1, 4])
def test_anthropic_split_pretty_input_is_kept_byte_for_byte(size: int) -> None:
    body = (
        anthropic_start()
        + anthropic_tool_use(0, "toolu_1", "get_weather", *fragments(PRETTY, size))
        + anthropic_stop("tool_use")
    )
    with RawStreams(stream(body, chunk_bytes=1)) as server:
        response = read(anthropic(server))
    assert response.tool_calls[0].arguments == PRETTY
    assert json.loads(response.tool_calls[0].arguments) == {"city": "Paris", "days": [1, 2]}


# -- 5. a 429 that can never succeed ---------------------------------------------------------

# As OpenAI answers (HTTP 429) and Groq (HTTP 413) when the request alone exceeds the
# tokens-per-minute limit; and, for contrast, OpenAI's ordinary per-minute 429.
OPENAI_TPM_TOO_LARGE = {
    "error": {
        "message": "Request too large for gpt-4o in organization org-abc on tokens per min "
        "(TPM): Limit 30000, Requested 342389. The input or output tokens must be reduced in "
        "order to run successfully. Visit https://platform.openai.com/account/rate-limits to "
        "learn more.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
GROQ_TPM_TOO_LARGE = {
    "error": {
        "message": "Request too large for model `llama-3.3-70b-versatile` in organization "
        "`org_01` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested "
        "14810, please reduce your message size and try again. Visit "
        "https://console.groq.com/docs/rate-limits for more information.",
        "type": "tokens",
        "code": "rate_limit_exceeded",
    }
}
OPENAI_TPM_REACHED = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-abc on tokens per min "
        "(TPM): Limit 30000, Used 27000, Requested 4000. Please try again in 2s.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


@pytest.mark.parametrize(
    ("status", "body"),
    [(429, OPENAI_TPM_TOO_LARGE), (413, GROQ_TPM_TOO_LARGE)],
    ids=["openai-429", "groq-413"],
)
def test_a_request_larger_than_the_tokens_per_minute_limit_is_not_retryable(
    status: int, body: dict[str, object]
) -> None:
    with (
        RawStreams(JsonReply(status, body)) as server,
        pytest.raises(ContextLengthError, match="tokens-per-minute limit") as info,
    ):
        read(openai(server))
    assert "Requested" in str(info.value)


def test_an_ordinary_tokens_per_minute_429_stays_retryable() -> None:
    with (
        RawStreams(JsonReply(429, OPENAI_TPM_REACHED, {"retry-after": "2"})) as server,
        pytest.raises(ModelRetryableError, match="try again in 2s") as info,
    ):
        read(openai(server))
    assert info.value.retry_after_s == 2.0


# -- 6. the terminal event without its blank line, on a stream held open ---------------------


def held(body: str) -> StreamReply:
    return stream(body, chunk_bytes=1, hold_s=HOLD_S)


@pytest.mark.parametrize("ending", ["data: [DONE]\n", "data: [DONE]"], ids=["newline", "bare"])
def test_openai_done_without_a_blank_line_ends_a_held_open_stream(ending: str) -> None:
    # Finish without usage: only [DONE] (or the long grace) ends the wait.
    body = openai_chunk({"content": "ok"}) + openai_chunk(finish="stop") + ending
    with RawStreams(held(body)) as server:
        response = read(openai(server))
    assert (response.text, response.stop_reason) == ("ok", "stop")


def test_done_without_a_blank_line_completes_a_stream_that_had_no_finish_reason() -> None:
    body = NO_FINISH_TOOL_CALL.removesuffix("\n")
    with RawStreams(held(body)) as server:
        response = read(openai(server))
    assert (response.stop_reason, response.stop_inferred) == ("tool_calls", True)


def test_anthropic_message_stop_without_a_blank_line_ends_a_held_open_stream() -> None:
    body = anthropic_start() + ANTHROPIC_TEXT_BLOCK + anthropic_stop("end_turn").removesuffix("\n")
    with RawStreams(held(body)) as server:
        response = read(anthropic(server))
    assert (response.text, response.stop_reason) == ("Hi", "end_turn")
