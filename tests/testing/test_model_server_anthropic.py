"""The scripted model server speaks Anthropic Messages streaming, checked on the wire."""

from __future__ import annotations

import json

from model_server_support import (
    CONVERSATION,
    Event,
    anthropic_body,
    anthropic_tools,
    post,
    to_anthropic,
)

from fxdurable.cli.demo_agent import PROMPT, RELEASE
from fxdurable.cli.demo_agent import _policy as demo_policy
from fxdurable.runtime.models.base import ModelRequest
from fxdurable.runtime.models.scripted import call, reply
from fxdurable.testing import Quirks, ScriptedModelServer

HELLO = [{"role": "user", "content": "say hello to the world"}]


def kinds(events: list[Event]) -> list[str]:
    for e in events:
        assert e.event == e.json["type"]  # the event line names the data's type
    return [str(e.event) for e in events]


def partial_json(events: list[Event], index: int) -> list[str]:
    return [
        e.json["delta"]["partial_json"]
        for e in events
        if e.event == "content_block_delta" and e.json["index"] == index
    ]


def test_text_and_tool_use_stream_in_the_documented_event_order():
    script = [reply("Deploying now, as asked.", call("deploy", version="1.4"))]
    with ScriptedModelServer(script, quirks=Quirks(split_arguments=5)) as server:
        answer = post(f"{server.anthropic_base_url}/v1/messages", anthropic_body(HELLO))
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = answer.events
    names = kinds(events)
    deltas_text = names.index("content_block_stop") - 3
    deltas_tool = len(partial_json(events, 1))
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        *["content_block_delta"] * deltas_text,
        "content_block_stop",
        "content_block_start",
        *["content_block_delta"] * deltas_tool,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0].json["message"]
    assert start["role"] == "assistant" and start["model"] == "claude-test"
    assert start["usage"]["input_tokens"] == 5
    assert events[2].json["content_block"] == {"type": "text", "text": ""}
    text = "".join(
        e.json["delta"]["text"]
        for e in events
        if e.json.get("delta", {}).get("type") == "text_delta"
    )
    assert text == "Deploying now, as asked."
    tool_start = events[names.index("content_block_stop") + 1].json
    block = tool_start["content_block"]
    assert tool_start["index"] == 1
    assert block["type"] == "tool_use" and block["name"] == "deploy" and block["input"] == {}
    assert block["id"].startswith("toolu_")
    fragments = partial_json(events, 1)
    assert fragments[0] == ""  # the real API opens with an empty fragment
    assert max(len(f) for f in fragments) == 5
    assert json.loads("".join(fragments)) == {"version": "1.4"}
    delta = events[-2].json
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {"output_tokens": 5}  # 4 words + 1 call
    assert server.requests[0].response.tool_calls[0].provider_id == block["id"]


def test_text_only_ends_the_turn_and_ping_can_be_switched_off():
    with ScriptedModelServer([reply("hi")], quirks=Quirks(anthropic_ping=False)) as server:
        events = post(f"{server.anthropic_base_url}/v1/messages", anthropic_body(HELLO)).events
    assert kinds(events) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[-2].json["delta"]["stop_reason"] == "end_turn"


def test_pretty_arguments_reach_the_input_json_fragments():
    script = [reply("", call("deploy", version="1.4"))]
    with ScriptedModelServer(script, quirks=Quirks(pretty_arguments=True)) as server:
        events = post(f"{server.anthropic_base_url}/v1/messages", anthropic_body(HELLO)).events
    joined = "".join(partial_json(events, 0))
    assert joined == '{\n  "version": "1.4"\n}'


def test_request_is_read_back_into_the_model_request_the_client_meant():
    body = anthropic_body(
        to_anthropic(CONVERSATION),
        system=[{"type": "text", "text": CONVERSATION.instructions}],
        tools=anthropic_tools(CONVERSATION),
    )
    # the two tool results travel as blocks of one user message
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    with ScriptedModelServer([reply("ok")]) as server:
        assert post(f"{server.anthropic_base_url}/v1/messages", body).status == 200
    parsed = server.requests[0].request
    assert parsed == ModelRequest(
        instructions=CONVERSATION.instructions,
        messages=list(CONVERSATION.messages),
        tools=list(CONVERSATION.tools),
    )


def test_the_fxdurable_client_body_round_trips():
    """The package's own Anthropic request builder, read back, gives the request it was
    built from (compact arguments, as the runtime records them)."""
    from fxdurable.runtime.models.anthropic import build_anthropic_body

    body = build_anthropic_body("claude-test", CONVERSATION, max_tokens=256)
    with ScriptedModelServer([reply("ok")]) as server:
        assert post(f"{server.anthropic_base_url}/v1/messages", body).status == 200
    assert server.model_requests[0] == ModelRequest(
        instructions=CONVERSATION.instructions,
        messages=list(CONVERSATION.messages),
        tools=list(CONVERSATION.tools),
    )


def test_the_demo_policy_drives_the_server_unchanged():
    messages = [
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll run the test suite before shipping."},
                {"type": "tool_use", "id": "toolu_t1", "name": "run_tests", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_t1", "content": "128 passed"}
            ],
        },
    ]
    with ScriptedModelServer(demo_policy) as server:
        events = post(
            f"{server.anthropic_base_url}/v1/messages",
            anthropic_body(messages, system="You are a careful release engineer."),
        ).events
    starts = [e.json["content_block"] for e in events if e.event == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"]
    assert starts[1]["name"] == "deploy"
    assert json.loads("".join(partial_json(events, 1))) == {"version": RELEASE}
    tool = server.model_requests[0].messages[-1]
    assert (tool.role, tool.tool_call_id, tool.tool_name) == ("tool", "toolu_t1", "run_tests")


def test_unreadable_requests_get_a_400_in_anthropic_shape():
    with ScriptedModelServer([reply("ok")]) as server:
        answer = post(
            f"{server.anthropic_base_url}/v1/messages",
            anthropic_body([{"role": "system", "content": "x"}]),
        )
    assert answer.status == 400
    assert answer.json["type"] == "error"
    assert answer.json["error"]["type"] == "invalid_request_error"
