"""Error mapping at the provider boundary: statuses, Retry-After, context length, transport
failures, and the API key kept out of every message and repr."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest
from models_support import SECRET, FakeProvider, Reply, collect, request, run

from fxdurable.errors import (
    ContextLengthError,
    ModelError,
    ModelOverloadedError,
    ModelRetryableError,
)
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.runtime.models.errors import parse_error_body, parse_retry_after, stream_error
from fxdurable.runtime.models.http import display_url

PROVIDERS = ["openai", "anthropic"]


def make(kind: str, provider: FakeProvider, **kwargs):
    cls = OpenAIModel if kind == "openai" else AnthropicModel
    return cls(
        "m-1", base_url="http://llm.test", api_key=SECRET, transport=provider.transport, **kwargs
    )


def fail_with(kind: str, status: int, body: object = "", headers: dict[str, str] | None = None):
    text = body if isinstance(body, str) else json.dumps(body)
    ctype = "text/html" if isinstance(body, str) else "application/json"
    provider = FakeProvider(Reply(text, status=status, headers=headers or {}, content_type=ctype))
    with pytest.raises(ModelError) as info:
        run(collect(make(kind, provider), request()))
    message = str(info.value)
    assert SECRET not in message
    assert SECRET not in repr(info.value)
    return info.value


def openai_error(message, type_="invalid_request_error", code=None):
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def anthropic_error(message, type_="invalid_request_error"):
    return {"type": "error", "error": {"type": type_, "message": message}}


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_429_is_retryable_with_retry_after(kind, headers, expected):
    error = fail_with(kind, 429, openai_error("Rate limit reached", "rate_limit_error"), headers)
    assert type(error) is ModelOverloadedError  # a Fallback chain switches on it at once
    assert error.retry_after_s == expected
    assert "HTTP 429" in str(error) and "Rate limit reached" in str(error)


def test_retry_after_http_date():
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2025, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"Retry-After": later}, now=now) == 30.0
    earlier = format_datetime(datetime(2025, 1, 1, 11, 0, 0, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"Retry-After": earlier}, now=now) == 0.0
    assert parse_retry_after({"Retry-After": "-3"}) == 0.0
    assert parse_retry_after({"retry-after-ms": "x", "retry-after": "2"}) == 2.0


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (500, ModelRetryableError),
        (502, ModelRetryableError),
        (503, ModelOverloadedError),
        (504, ModelRetryableError),
        (529, ModelOverloadedError),
        (408, ModelRetryableError),
    ],
)
def test_server_errors_are_retryable(kind, status, expected):
    error = fail_with(kind, status, anthropic_error("Internal", "api_error"), {"retry-after": "3"})
    assert type(error) is expected
    assert f"HTTP {status}" in str(error)
    assert error.retry_after_s == 3.0


@pytest.mark.parametrize("kind", PROVIDERS)
def test_an_overloaded_error_body_is_an_overload_whatever_the_status(kind):
    error = fail_with(kind, 500, anthropic_error("Overloaded", "overloaded_error"))
    assert type(error) is ModelOverloadedError


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, True),
        ({"error": {"message": "slow down", "code": "429"}}, True),
        ({"error": {"message": "try later", "code": 503}}, True),
        ({"type": "error", "error": {"type": "api_error", "message": "oops"}}, False),
    ],
)
def test_mid_stream_overloads_are_told_apart(payload, expected):
    error = stream_error("anthropic", payload, secret=None)
    assert isinstance(error, ModelRetryableError)
    assert isinstance(error, ModelOverloadedError) is expected


@pytest.mark.parametrize("kind", PROVIDERS)
def test_html_error_page_is_readable(kind):
    error = fail_with(kind, 502, "<html>\n<body>\n<h1>502 Bad Gateway</h1>\n</body></html>")
    assert type(error) is ModelRetryableError
    assert "502 Bad Gateway" in str(error)


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    "body",
    [
        openai_error(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens.",
            code="context_length_exceeded",
        ),
        openai_error("Input too long.", code="context_length_exceeded"),
        anthropic_error("prompt is too long: 210000 tokens > 200000 maximum"),
        # vLLM
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
        # a gateway
        {"error": "input exceeds the context window of this model"},
    ],
)
def test_context_length_is_detected(kind, body):
    error = fail_with(kind, 400, body)
    assert type(error) is ContextLengthError
    assert "HTTP 400" in str(error)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_413_request_too_large_is_context_length(kind):
    error = fail_with(
        kind, 413, anthropic_error("Request exceeds the maximum size", "request_too_large")
    )
    assert type(error) is ContextLengthError


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (400, openai_error("Invalid 'messages[1].content': string too long."), "string too long"),
        (401, openai_error(f"Incorrect API key provided: {SECRET}."), "API key"),
        (
            403,
            anthropic_error("Your API key does not have permission", "permission_error"),
            "HTTP 403",
        ),
        (404, {"error": "model 'm-1' not found"}, "model 'm-1' not found"),  # Ollama's shape
        (422, {"detail": [{"msg": "field required"}]}, "HTTP 422"),
    ],
)
def test_client_errors_are_not_retried(kind, status, body, says):
    error = fail_with(kind, status, body)
    assert type(error) is ModelError
    assert f"HTTP {status}" in str(error)
    assert says in str(error)


def test_429_out_of_quota_is_not_retried():
    body = openai_error(
        "You exceeded your current quota.", "insufficient_quota", "insufficient_quota"
    )
    error = fail_with("openai", 429, body, {"retry-after": "1"})
    assert type(error) is ModelError
    assert "quota" in str(error)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_401_names_the_environment_variable_and_hides_the_echoed_key(kind):
    error = fail_with(kind, 401, openai_error(f"Incorrect API key provided: {SECRET}"))
    env = "OPENAI_API_KEY" if kind == "openai" else "ANTHROPIC_API_KEY"
    assert env in str(error)
    assert "***" in str(error)


def test_404_names_the_url_without_credentials():
    provider = FakeProvider(Reply("Not Found", status=404, content_type="text/plain"))
    model = OpenAIModel(
        "m", base_url="http://user:hunter2@llm.test/v1", transport=provider.transport
    )
    with pytest.raises(ModelError) as info:
        run(collect(model, request()))
    assert "llm.test/v1/chat/completions" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert "hunter2" not in repr(model)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_error_body_is_read_with_a_cap(kind):
    error = fail_with(kind, 400, openai_error("x" * 2_000_000))
    assert len(str(error)) < 1000


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "could not connect"),
        (httpx.ConnectTimeout("timed out"), "connect timeout"),
        (httpx.ReadTimeout("timed out"), "read timeout"),
        (httpx.WriteTimeout("timed out"), "timed out"),
        (httpx.PoolTimeout("timed out"), "timed out"),
        (httpx.RemoteProtocolError("Server disconnected without sending a response."), "broke"),
        (httpx.ReadError("connection reset"), "broke"),
    ],
)
def test_transport_failures_are_retryable(kind, exc, says):
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with pytest.raises(ModelRetryableError, match=says) as info:
        run(collect(make(kind, FakeProvider(handler)), request()))
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_bad_base_url_is_a_model_error(kind):
    cls = OpenAIModel if kind == "openai" else AnthropicModel
    with pytest.raises(ModelError, match="base URL") as info:
        run(collect(cls("m", base_url="ftp://llm.test"), request()))
    assert not isinstance(info.value, ModelRetryableError)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_repr_and_vars_never_show_the_key(kind, monkeypatch):
    cls = OpenAIModel if kind == "openai" else AnthropicModel
    model = cls("m-1", api_key=SECRET, base_url="http://llm.test")
    assert SECRET not in repr(model)
    assert SECRET not in str(model)
    assert SECRET not in repr(vars(model))
    assert repr(model) == f"{cls.__name__}(model='m-1', base_url='http://llm.test')"
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    from_env = cls("m-1", base_url="http://llm.test")
    assert SECRET not in repr(vars(from_env))


def test_display_url_drops_credentials_and_query():
    assert display_url("http://u:p@h.test:8080/v1?key=k") == "http://h.test:8080/v1"
    assert display_url("https://api.openai.com/v1") == "https://api.openai.com/v1"


def test_parse_error_body_shapes():
    assert parse_error_body('{"error": {"message": "m", "type": "t", "code": 5}}').code == "5"
    assert parse_error_body('[{"error": {"message": "wrapped"}}]').message == "wrapped"
    assert parse_error_body(b"plain   text\n").message == "plain text"
    assert (
        parse_error_body('{"message": "vllm", "type": "BadRequestError"}').type == "BadRequestError"
    )
