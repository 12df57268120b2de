"""The scripted model server speaks OpenAI Chat Completions streaming, checked on the wire."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from model_server_support import (
    CONVERSATION,
    Event,
    openai_body,
    openai_tools,
    post,
    to_openai,
)

from fxdurable.cli.demo_agent import PROMPT
from fxdurable.cli.demo_agent import _policy as demo_policy
from fxdurable.runtime.models.base import ModelRequest
from fxdurable.runtime.models.scripted import call, reply
from fxdurable.testing import Quirks, ScriptedModelServer

USAGE = {"stream_options": {"include_usage": True}}
HELLO = [{"role": "user", "content": "say hello to the world"}]


def chunks(events: list[Event]) -> list[dict]:
    assert events[-1].data == "[DONE]"
    return [e.json for e in events[:-1]]


def arguments_by_index(chunk_list: list[dict]) -> dict[int, str]:
    out: dict[int, str] = defaultdict(str)
    for c in chunk_list:
        for tc in c["choices"][0]["delta"].get("tool_calls", []) if c["choices"] else []:
            out[tc["index"]] += tc["function"].get("arguments", "")
    return dict(out)


def test_text_stream_has_role_deltas_finish_then_usage_with_empty_choices_then_done():
    with ScriptedModelServer([reply("Hello there, wide world of streams")]) as server:
        answer = post(f"{server.openai_base_url}/chat/completions", openai_body(HELLO, **USAGE))
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = answer.events
    assert all(e.event is None for e in events)
    body = chunks(events)
    assert {c["object"] for c in body} == {"chat.completion.chunk"}
    assert len({c["id"] for c in body}) == 1
    assert body[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    texts = [c["choices"][0]["delta"]["content"] for c in body[1:-2]]
    assert len(texts) > 1  # streamed in pieces
    assert "".join(texts) == "Hello there, wide world of streams"
    finish, usage = body[-2], body[-1]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["choices"][0]["delta"] == {}
    assert finish["usage"] is None
    assert usage["choices"] == []
    # words in the request messages; words out (as ScriptedModel counts them)
    assert usage["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 6,
        "total_tokens": 11,
        # what OpenAI's usage also has: nothing cached (no prompt_cache quirk), no reasoning
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert all(c["choices"][0]["finish_reason"] is None for c in body[:-2])


def test_no_usage_unless_asked_and_usage_on_the_finish_chunk_when_not_last():
    with ScriptedModelServer([reply("hi")]) as server:
        url = f"{server.openai_base_url}/chat/completions"
        plain = chunks(post(url, openai_body(HELLO)).events)
        server.quirks = Quirks(usage_last=False)
        inline = chunks(post(url, openai_body(HELLO, **USAGE)).events)
    assert all("usage" not in c for c in plain)
    assert plain[-1]["choices"][0]["finish_reason"] == "stop"
    assert inline[-1]["choices"][0]["finish_reason"] == "stop"
    assert inline[-1]["usage"]["completion_tokens"] == 1


def test_tool_calls_open_with_id_and_name_then_argument_fragments_then_finish_tool_calls():
    script = [reply("", call("deploy", version="1.4", note="ship it"), call("run_tests"))]
    with ScriptedModelServer(script, quirks=Quirks(split_arguments=4)) as server:
        answer = post(f"{server.openai_base_url}/chat/completions", openai_body(HELLO))
    body = chunks(answer.events)
    assert body[-1]["choices"][0]["finish_reason"] == "tool_calls"
    openings = [
        tc for c in body for tc in c["choices"][0]["delta"].get("tool_calls", []) if "id" in tc
    ]
    assert [(o["index"], o["type"], o["function"]) for o in openings] == [
        (0, "function", {"name": "deploy", "arguments": ""}),
        (1, "function", {"name": "run_tests", "arguments": ""}),
    ]
    assert all(o["id"].startswith("call_") for o in openings)
    assert openings[0]["id"] != openings[1]["id"]
    fragments = [
        tc["function"]["arguments"]
        for c in body
        for tc in c["choices"][0]["delta"].get("tool_calls", [])
        if "id" not in tc
    ]
    assert max(len(f) for f in fragments) == 4 and len(fragments) > 5
    assert arguments_by_index(body) == {
        0: '{"note": "ship it", "version": "1.4"}',
        1: "{}",
    }
    # what was streamed is what was recorded, ids included
    recorded = server.requests[0].response
    assert recorded is not None
    assert [c.provider_id for c in recorded.tool_calls] == [o["id"] for o in openings]


def test_parallel_calls_interleave_their_fragments_by_index():
    script = [reply("", call("a", x="1234567890"), call("b", y="abcdefghij"))]
    quirks = Quirks(split_arguments=3, interleave_parallel=True)
    with ScriptedModelServer(script, quirks=quirks) as server:
        body = chunks(post(f"{server.openai_base_url}/chat/completions", openai_body(HELLO)).events)
    order = [tc["index"] for c in body for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert order[:6] == [0, 1, 0, 1, 0, 1]
    assert arguments_by_index(body) == {0: '{"x": "1234567890"}', 1: '{"y": "abcdefghij"}'}


def test_pretty_arguments_put_newlines_and_indentation_inside_the_arguments_string():
    script = [reply("", call("deploy", version="1.4", force=False))]
    with ScriptedModelServer(script, quirks=Quirks(pretty_arguments=True)) as server:
        body = chunks(post(f"{server.openai_base_url}/chat/completions", openai_body(HELLO)).events)
    arguments = arguments_by_index(body)[0]
    assert "\n" in arguments and '\n  "version"' in arguments
    assert json.loads(arguments) == {"version": "1.4", "force": False}


def test_omit_done_ends_after_the_finish():
    with ScriptedModelServer([reply("hi")], quirks=Quirks(omit_done=True)) as server:
        events = post(f"{server.openai_base_url}/chat/completions", openai_body(HELLO)).events
    assert events[-1].json["choices"][0]["finish_reason"] == "stop"
    assert all(e.data != "[DONE]" for e in events)


def test_request_is_read_back_into_the_model_request_the_client_meant():
    body = openai_body(to_openai(CONVERSATION), tools=openai_tools(CONVERSATION))
    with ScriptedModelServer([reply("ok")]) as server:
        assert post(f"{server.openai_base_url}/chat/completions", body).status == 200
    parsed = server.requests[0].request
    assert parsed == ModelRequest(
        instructions=CONVERSATION.instructions,
        messages=list(CONVERSATION.messages),
        tools=list(CONVERSATION.tools),
    )
    # the tool name is not on the wire for a tool message: it came from the call's id
    tool_messages = [m for m in parsed.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.tool_name) for m in tool_messages] == [
        ("call_a1", "run_tests"),
        ("call_b2", "deploy"),
    ]
    assert server.model_requests == [parsed]


def test_content_parts_and_several_system_messages_are_read():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Be kind."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}],
        },
    ]
    with ScriptedModelServer([reply("ok")]) as server:
        post(f"{server.openai_base_url}/chat/completions", openai_body(messages))
    parsed = server.model_requests[0]
    assert parsed.instructions == "Be brief.\n\nBe kind."
    assert [m.text for m in parsed.messages] == ["hi there"]


def test_the_demo_policy_drives_the_server_unchanged():
    """The policy reacts to tool results it can only name through the recovered tool name."""
    messages = [
        {"role": "system", "content": "You are a careful release engineer."},
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": "I'll run the test suite before shipping.",
            "tool_calls": [
                {
                    "id": "call_t1",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_t1", "content": "128 passed, 0 failed"},
    ]
    with ScriptedModelServer(demo_policy) as server:
        url = f"{server.openai_base_url}/chat/completions"
        first = chunks(post(url, openai_body(messages[:2])).events)
        second = chunks(post(url, openai_body(messages)).events)
    assert arguments_by_index(first) == {0: "{}"}
    assert first[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert arguments_by_index(second) == {0: '{"version": "1.4"}'}
    names = [
        tc["function"]["name"]
        for c in second
        for tc in c["choices"][0]["delta"].get("tool_calls", [])
        if "id" in tc
    ]
    assert names == ["deploy"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"model": "m", "messages": HELLO}, "only streams"),
        ({"model": "m", "stream": True, "messages": [{"role": "wizard", "content": "x"}]}, "role"),
        ({"model": "m", "stream": True, "messages": "hello"}, "messages"),
        ({"model": "m", "stream": True, "messages": [{"role": "tool", "content": "x"}]}, "id"),
    ],
)
def test_unreadable_or_non_streaming_requests_get_a_400_in_openai_shape(body, reason):
    with ScriptedModelServer([reply("ok")]) as server:
        answer = post(f"{server.openai_base_url}/chat/completions", body)
    assert answer.status == 400
    error = answer.json["error"]
    assert error["type"] == "invalid_request_error"
    assert reason in error["message"]
    assert server.requests[0].status == 400 and server.requests[0].request is None


def test_the_fxdurable_client_body_round_trips():
    """The package's own Chat Completions request builder, read back, gives the request it
    was built from."""
    from fxdurable.runtime.models.openai import build_openai_body

    body = build_openai_body("gpt-test", CONVERSATION)
    with ScriptedModelServer([reply("ok")]) as server:
        assert post(f"{server.openai_base_url}/chat/completions", body).status == 200
    assert server.model_requests[0] == ModelRequest(
        instructions=CONVERSATION.instructions,
        messages=list(CONVERSATION.messages),
        tools=list(CONVERSATION.tools),
    )
