"""Provider-owned content parsed from the documented stream formats and given back verbatim.

Byte streams as the providers document them: Anthropic extended thinking (``thinking_delta``
pieces, one ``signature_delta``, a ``redacted_thinking`` block whole in its start), server
tools (``server_tool_use`` with streamed input, ``web_search_tool_result``), text with a
``citations_delta``; chat completions with DeepSeek's ``reasoning_content`` deltas,
OpenRouter's ``reasoning_details`` pieces and Gemini's ``extra_content`` thought signature.
Each is read through the real client (1-byte chunks too), and the next request is built from
the recorded calls after a trip through the record codec, as a recovered turn reads them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import raw_stream_support as raw
from models_support import FakeProvider, Reply, collect, request, run

from fxdurable.core.recordcodec import decode, encode
from fxdurable.core.records import MessageRecord, ToolCallRequest
from fxdurable.runtime.models import AnthropicModel, OpenAIModel
from fxdurable.runtime.models.anthropic import build_anthropic_body
from fxdurable.runtime.models.base import ChatMessage, ModelRequest
from fxdurable.runtime.models.openai import build_openai_body

THINKING = 'Let me think: naïve ✓ "quoted" \\ and a newline\nthen more '
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
CALLER = {"type": "direct"}  # a field this client does not know, on the tool_use block

ANTHROPIC_THINKING_TOOL_USE = (
    raw.anthropic_start()
    + raw.anthropic_event(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        }
    )
    + "".join(
        raw.anthropic_event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": THINKING[i : i + 7]},
            }
        )
        for i in range(0, len(THINKING), 7)
    )
    + raw.anthropic_event(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": SIGNATURE},
        }
    )
    + raw.anthropic_event({"type": "content_block_stop", "index": 0})
    + raw.anthropic_event(
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": REDACTED},
        }
    )
    + raw.anthropic_event({"type": "content_block_stop", "index": 1})
    + raw.anthropic_event(
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "text", "text": ""},
        }
    )
    + raw.anthropic_event(
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "text_delta", "text": "Checking."},
        }
    )
    + raw.anthropic_event({"type": "content_block_stop", "index": 2})
    + raw.anthropic_event(
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "lookup",
                "input": {},
                "caller": CALLER,
            },
        }
    )
    + raw.anthropic_event(
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": '{"q": "x"}'},
        }
    )
    + raw.anthropic_event({"type": "content_block_stop", "index": 3})
    + raw.anthropic_stop("tool_use")
)


def anthropic(provider: FakeProvider) -> AnthropicModel:
    return AnthropicModel(
        "claude-x", base_url="http://llm.test", transport=provider.transport, finish_grace_s=0.2
    )


def recovered(calls: tuple[ToolCallRequest, ...]) -> tuple[ToolCallRequest, ...]:
    """The calls as a recovered turn reads them: through the record codec of every store."""
    record = MessageRecord(
        session_id="s", seq=1, turn_id="t", role="assistant", text="", tool_calls=calls
    )
    back = decode(MessageRecord, encode(record))
    return back.tool_calls


def follow_up(calls: tuple[ToolCallRequest, ...], text: str) -> ModelRequest:
    return ModelRequest(
        instructions="",
        messages=[
            ChatMessage(role="user", text="hi"),
            ChatMessage(role="assistant", text=text, tool_calls=calls),
            ChatMessage(role="tool", text="42", tool_call_id=calls[0].provider_id),
        ],
    )


@pytest.mark.parametrize("chunk", [None, 1])
def test_anthropic_thinking_is_kept_out_of_the_text_and_given_back_unchanged(chunk):
    provider = FakeProvider(Reply(ANTHROPIC_THINKING_TOOL_USE, chunk=chunk))
    deltas, response = run(collect(anthropic(provider), request()))

    assert deltas == ["Checking."] and response.text == "Checking."
    (call,) = response.tool_calls
    assert (call.name, call.arguments, call.provider_id) == ("lookup", '{"q": "x"}', "toolu_01A")
    calls = recovered(response.tool_calls)
    body = build_anthropic_body("claude-x", follow_up(calls, response.text), max_tokens=64)
    assistant = body["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": REDACTED},
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "lookup",
                "input": {"q": "x"},
                "caller": CALLER,
            },
        ],
    }
    # Byte for byte on the wire too: the thinking's JSON text is in the request's body.
    assert json.dumps(THINKING)[1:-1] in json.dumps(body)
    # Another wire reads none of it.
    openai_body = build_openai_body("gpt-x", follow_up(calls, response.text))
    assert "thinking" not in json.dumps(openai_body) and SIGNATURE not in json.dumps(openai_body)


def test_anthropic_server_tool_blocks_are_history_never_client_calls():
    search_input = '{"query": "fxdurable"}'
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [{"type": "web_search_result", "url": "https://e.x", "encrypted_content": "Eq"}],
    }
    citation = {"type": "web_search_result_location", "url": "https://e.x", "cited_text": "c"}
    events = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": search_input},
        },
        {"type": "content_block_start", "index": 1, "content_block": result},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "citations_delta", "citation": citation},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "text_delta", "text": "It is a runtime."},
        },
    ]
    body = (
        raw.anthropic_start()
        + "".join(raw.anthropic_event(e) for e in events)
        + raw.anthropic_tool_use(3, "toolu_02", "save", '{"note": "runtime"}')
        + raw.anthropic_stop("tool_use")
    )
    _, response = run(collect(anthropic(FakeProvider(Reply(body))), request()))

    assert [c.name for c in response.tool_calls] == ["save"], "a server tool is not ours to run"
    assert response.text == "It is a runtime."
    sent = build_anthropic_body(
        "claude-x", follow_up(recovered(response.tool_calls), response.text), max_tokens=64
    )
    assert sent["messages"][1]["content"] == [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_01",
            "name": "web_search",
            "input": {"query": "fxdurable"},
        },
        result,
        {"type": "text", "text": "It is a runtime.", "citations": [citation]},
        {"type": "tool_use", "id": "toolu_02", "name": "save", "input": {"note": "runtime"}},
    ]


def test_a_plain_anthropic_response_records_no_parts():
    body = raw.anthropic_start() + raw.anthropic_tool_use(0, "toolu_1", "f", "{}")
    _, response = run(
        collect(anthropic(FakeProvider(Reply(body + raw.anthropic_stop("tool_use")))), request())
    )
    assert response.tool_calls == (
        ToolCallRequest(name="f", arguments="{}", provider_id="toolu_1"),
    )


def openai(provider: FakeProvider) -> OpenAIModel:
    return OpenAIModel(
        "deepseek-x",
        base_url="http://llm.test/v1",
        transport=provider.transport,
        finish_grace_s=0.2,
    )


SIGNED = {"google": {"thought_signature": "CsUBAY89a1+/sig=="}}


def chat_stream(*deltas: dict[str, Any]) -> str:
    return (
        "".join(raw.openai_chunk(delta) for delta in deltas)
        + raw.openai_chunk(finish="tool_calls")
        + raw.openai_usage()
        + "data: [DONE]\n\n"
    )


@pytest.mark.parametrize("chunk", [None, 1])
def test_deepseek_reasoning_content_goes_back_on_the_message_with_its_tool_calls(chunk):
    stream = chat_stream(
        {"role": "assistant", "content": None, "reasoning_content": THINKING[:10]},
        {"content": None, "reasoning_content": THINKING[10:]},
        {"content": "", "reasoning_content": None},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                    "extra_content": SIGNED,
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"q": 1}'}}]},
    )
    deltas, response = run(collect(openai(FakeProvider(Reply(stream, chunk=chunk))), request()))

    assert deltas == [] and response.text == ""
    body = build_openai_body("deepseek-x", follow_up(recovered(response.tool_calls), ""))
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": THINKING,
        "tool_calls": [
            {
                "extra_content": SIGNED,
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": 1}'},
            }
        ],
    }
    anthropic_body = build_anthropic_body(
        "claude-x", follow_up(recovered(response.tool_calls), ""), max_tokens=64
    )
    assert "reasoning" not in json.dumps(anthropic_body) and "thought" not in json.dumps(
        anthropic_body
    )


def test_openrouter_reasoning_details_pieces_are_joined_and_unknown_fields_kept():
    stream = chat_stream(
        {"role": "assistant", "content": "", "reasoning": "Think", "vendor_x": {"a": 1}},
        {
            "reasoning": "ing.",
            "reasoning_details": [
                {
                    "type": "reasoning.text",
                    "text": "Think",
                    "index": 0,
                    "format": "anthropic-claude-v1",
                }
            ],
        },
        {
            "reasoning_details": [
                {"type": "reasoning.text", "text": "ing.", "index": 0, "signature": None}
            ]
        },
        {"reasoning_details": [{"type": "reasoning.text", "index": 0, "signature": SIGNATURE}]},
        {"reasoning_details": [{"type": "reasoning.encrypted", "data": REDACTED, "index": 1}]},
        raw_call("call_9", "f", "{}"),
    )
    _, response = run(collect(openai(FakeProvider(Reply(stream))), request()))

    message = build_openai_body("x", follow_up(recovered(response.tool_calls), ""))["messages"][1]
    assert message["reasoning"] == "Thinking."
    assert message["vendor_x"] == {"a": 1}
    assert message["reasoning_details"] == [
        {
            "type": "reasoning.text",
            "text": "Thinking.",
            "index": 0,
            "format": "anthropic-claude-v1",
            "signature": SIGNATURE,
        },
        {"type": "reasoning.encrypted", "data": REDACTED, "index": 1},
    ]


def raw_call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": 0,
                "id": id_,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
    }


def test_a_record_written_before_parts_existed_still_decodes():
    old = '{"name": "f", "arguments": "{}", "provider_id": "c1"}'
    assert decode(ToolCallRequest, old) == ToolCallRequest(
        name="f", arguments="{}", provider_id="c1"
    )


def test_an_empty_reasoning_content_is_still_given_back_and_empty_lists_are_not():
    """DeepSeek refuses a tool-call message without ``reasoning_content`` even when the
    model's reasoning was empty; an empty ``annotations`` list has nothing to give back."""
    stream = chat_stream(
        {"role": "assistant", "content": None, "reasoning_content": "", "annotations": []},
        raw_call("call_5", "f", "{}"),
    )
    _, response = run(collect(openai(FakeProvider(Reply(stream))), request()))

    message = build_openai_body("x", follow_up(recovered(response.tool_calls), ""))["messages"][1]
    assert message["reasoning_content"] == ""
    assert "annotations" not in message
