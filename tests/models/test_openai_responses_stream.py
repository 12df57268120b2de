"""The Responses API provider read from byte streams written here from the documented event
formats, served over a real socket and read by the real httpx client: one-byte chunks,
bodies held open after the terminal event, errors inside a 200 stream, ``response.failed``
and ``response.incomplete``, usage details, and the request body rebuilt from history.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from models_support import collect, request, run
from raw_stream_support import HOLD_S, RawStreams, stream

from fxdurable.errors import (
    ContextLengthError,
    ModelError,
    ModelOverloadedError,
    ModelRetryableError,
)
from fxdurable.runtime.models import OpenAIResponsesModel, resolve_model
from fxdurable.runtime.models.base import ChatMessage, ModelResponse
from fxdurable.runtime.models.openai_responses_stream import ResponsesParser
from fxdurable.runtime.models.sse import SSEDecoder

ENCRYPTED = 'gAAAA\\"naïve ✓ \n+/=='  # bytes that must come back exactly
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": ENCRYPTED}
ARGS = '{\n  "city" :"Paris"}'
USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 64},
    "output_tokens": 40,
    "output_tokens_details": {"reasoning_tokens": 32},
    "total_tokens": 160,
}


def ev(kind: str, **fields: Any) -> str:
    data = json.dumps({"type": kind, **fields, "sequence_number": 0}, ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n"


def terminal(kind: str = "response.completed", output: list[Any] | None = None, **r: Any) -> str:
    status = {"response.completed": "completed", "response.incomplete": "incomplete"}
    response = {"id": "resp_1", "object": "response", "status": status.get(kind, "failed")}
    return ev(kind, response={**response, "output": output or [], "usage": USAGE, **r})


def reasoning_item() -> str:
    added = {k: v for k, v in REASONING.items() if k != "encrypted_content"}
    return ev("response.output_item.added", output_index=0, item=added) + ev(
        "response.output_item.done", output_index=0, item=REASONING
    )


def text_item(index: int, *pieces: str) -> str:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    out = ev("response.output_item.added", output_index=index, item=message)
    out += ev(
        "response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, delta="THINK"
    )
    for piece in pieces:
        out += ev("response.output_text.delta", item_id="msg_1", output_index=index, delta=piece)
    done = {**message, "content": [{"type": "output_text", "text": "".join(pieces)}]}
    return out + ev("response.output_item.done", output_index=index, item=done)


def call_item(index: int, call_id: str, *fragments: str) -> str:
    item = {"id": f"fc_{call_id}", "type": "function_call", "status": "in_progress"}
    item |= {"arguments": "", "call_id": call_id, "name": "get_weather"}
    out = ev("response.output_item.added", output_index=index, item=item)
    for fragment in fragments:
        out += ev(
            "response.function_call_arguments.delta",
            item_id=item["id"],
            output_index=index,
            delta=fragment,
        )
    whole = "".join(fragments)
    out += ev(
        "response.function_call_arguments.done",
        item_id=item["id"],
        output_index=index,
        arguments=whole,
    )
    done = {**item, "status": "completed", "arguments": whole}
    return out + ev("response.output_item.done", output_index=index, item=done)


def model(server: RawStreams) -> OpenAIResponsesModel:
    # A long grace: a test that passes did not wait for it.
    return OpenAIResponsesModel("gpt-x", base_url=f"{server.url}/v1", finish_grace_s=HOLD_S)


def read(body: str, **kw: Any) -> tuple[list[str], ModelResponse, dict[str, Any]]:
    with RawStreams(stream(body, **kw)) as server:
        deltas, response = run(collect(model(server), request()))
    return deltas, response, server.bodies[0]


def test_a_call_with_its_reasoning_one_byte_at_a_time_on_a_held_open_body() -> None:
    body = (
        reasoning_item()
        + text_item(1, "Let me ", "look.")
        + call_item(2, "call_a", ARGS[:7], ARGS[7:])
    )
    body += terminal()
    deltas, response, sent = read(body, chunk_bytes=1, hold_s=HOLD_S)

    assert "".join(deltas) == response.text == "Let me look.", "never the reasoning summary"
    (call,) = response.tool_calls
    assert (call.name, call.arguments, call.provider_id) == ("get_weather", ARGS, "call_a")
    assert call.wire == "openai-responses"
    kinds = [part["type"] for part in call.parts]
    assert kinds == ["reasoning", "message", "function_call"]
    assert call.parts[0] == REASONING, "kept verbatim, encrypted_content byte for byte"
    assert "arguments" not in call.parts[2], "the recorded arguments are the call's"
    assert (response.stop_reason, response.truncated) == ("completed", False)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (120, 40)
    assert sent["store"] is False and sent["stream"] is True
    assert sent["include"] == ["reasoning.encrypted_content"]
    assert sent["instructions"] == "be brief"
    assert sent["tools"][0]["name"] == "get_weather" and "function" not in sent["tools"][0]


def test_usage_details_cached_and_reasoning_tokens() -> None:
    parser = ResponsesParser(secret=None, provider="OpenAI")
    for event in SSEDecoder().feed(text_item(0, "hi") + terminal()):
        parser.feed(event)
    assert parser.complete
    usage = parser.response().usage
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (64, 32)


def test_the_next_request_carries_the_items_back_verbatim_then_the_output() -> None:
    first = reasoning_item() + text_item(1, "Looking.") + call_item(2, "call_a", ARGS)
    with RawStreams(
        stream(first + terminal()), stream(text_item(0, "Sunny.") + terminal())
    ) as server:
        m = model(server)
        _, response = run(collect(m, request()))
        history = [
            ChatMessage(role="user", text="hi"),
            ChatMessage(role="assistant", text=response.text, tool_calls=response.tool_calls),
            ChatMessage(role="tool", text="sunny", tool_call_id="call_a"),
        ]
        _, answer = run(collect(m, request(messages=history)))
    assert answer.text == "Sunny." and answer.tool_calls == ()
    items = server.bodies[1]["input"]
    assert items[0] == {"type": "message", "role": "user", "content": "hi"}
    assert items[1] == REASONING
    assert items[2]["type"] == "message" and items[2]["id"] == "msg_1"
    assert items[3] == {
        "id": "fc_call_a",
        "type": "function_call",
        "status": "completed",
        "call_id": "call_a",
        "name": "get_weather",
        "arguments": ARGS,
    }
    assert items[4] == {"type": "function_call_output", "call_id": "call_a", "output": "sunny"}


def test_incomplete_at_max_output_tokens_is_a_truncated_response() -> None:
    body = text_item(0, "The answer is")
    body += terminal("response.incomplete", incomplete_details={"reason": "max_output_tokens"})
    _, response, _ = read(body, chunk_bytes=1, hold_s=HOLD_S)
    assert response.text == "The answer is"
    assert (response.stop_reason, response.truncated) == ("max_output_tokens", True)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"code": "server_error", "message": "The server had an error."}, ModelRetryableError),
        ({"code": "rate_limit_exceeded", "message": "Slow down."}, ModelOverloadedError),
        (
            {"code": "context_length_exceeded", "message": "Your input exceeds the context window"},
            ContextLengthError,
        ),
        (
            {
                "code": "invalid_prompt",
                "message": "Invalid prompt.",
                "type": "invalid_request_error",
            },
            ModelError,
        ),
    ],
    ids=["server", "rate", "context", "invalid"],
)
@pytest.mark.parametrize("where", ["error_event", "response_failed"])
def test_an_error_inside_a_200_stream_is_a_failed_call(
    payload: dict[str, Any], error: type[ModelError], where: str
) -> None:
    if where == "error_event":
        tail = ev("error", param=None, **payload)
    else:
        tail = terminal("response.failed", error=payload)
    body = text_item(0, "half") + tail
    with (
        RawStreams(stream(body, chunk_bytes=1, hold_s=HOLD_S)) as server,
        pytest.raises(ModelError) as info,
    ):
        run(collect(model(server), request()))
    assert type(info.value) is error
    assert payload["message"] in str(info.value)


def test_a_stream_cut_inside_a_call_without_a_terminal_event_is_retryable() -> None:
    cut = text_item(0, "x") + call_item(1, "call_a", '{"city": "Pa')
    with RawStreams(stream(cut, chunk_bytes=1)) as server, pytest.raises(ModelRetryableError):
        run(collect(model(server), request()))


def test_model_string_environment_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # empty counts as unset
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    m = resolve_model("openai-responses/gpt-5")
    assert isinstance(m, OpenAIResponsesModel)
    assert (m.name, m.base_url) == ("openai-responses/gpt-5", "https://api.openai.com/v1")
    with RawStreams(stream(text_item(0, "hi") + terminal())) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
        via_env = resolve_model("openai-responses/gpt-5")
        run(collect(via_env, request()))
    assert server.bodies[0]["model"] == "gpt-5"
    assert m.settings_described() == [
        "OpenAI-Organization from OPENAI_ORG_ID",
        "OpenAI-Project from OPENAI_PROJECT_ID",
    ]


def test_parallel_calls_share_the_items_in_order_and_come_back_in_order() -> None:
    body = reasoning_item() + call_item(1, "call_a", ARGS) + call_item(2, "call_b", "{}")
    with RawStreams(
        stream(body + terminal(), chunk_bytes=5), stream(text_item(0, "ok") + terminal())
    ) as server:
        m = model(server)
        _, response = run(collect(m, request()))
        a, b = response.tool_calls
        assert [p["type"] for p in a.parts] == ["reasoning", "function_call"]
        assert [p["type"] for p in b.parts] == ["function_call"]
        history = [
            ChatMessage(role="user", text="hi"),
            ChatMessage(role="assistant", text="", tool_calls=response.tool_calls),
            ChatMessage(role="tool", text="1", tool_call_id="call_a"),
            ChatMessage(role="tool", text="2", tool_call_id="call_b"),
        ]
        run(collect(m, request(messages=history)))
    sent = [(i["type"], i.get("call_id")) for i in server.bodies[1]["input"]]
    assert sent == [
        ("message", None),
        ("reasoning", None),
        ("function_call", "call_a"),
        ("function_call", "call_b"),
        ("function_call_output", "call_a"),
        ("function_call_output", "call_b"),
    ]
    assert server.bodies[1]["input"][3]["arguments"] == "{}"
