"""Helpers for the wire-format model server tests: raw httpx requests and an SSE splitter
written from the public format (not the package's own parser, which is under test elsewhere)."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ToolSpec

FAST = httpx.Timeout(2.0)
_TLS = ssl.create_default_context()  # built once: a fresh httpx.Client would load it each time


def client(timeout: httpx.Timeout = FAST) -> httpx.Client:
    return httpx.Client(timeout=timeout, verify=_TLS)


@dataclass
class Event:
    event: str | None
    data: str

    @property
    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    raw: bytes

    @property
    def events(self) -> list[Event]:
        return split_events(self.raw.decode())

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


def split_events(text: str) -> list[Event]:
    out: list[Event] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
        out.append(Event(event, "\n".join(data)))
    return out


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> Reply:
    """POST and read the whole (streamed) answer."""
    with (
        client() as http,
        http.stream("POST", url, json=body, headers=headers or {}) as response,
    ):
        raw = b"".join(response.iter_raw())
        return Reply(response.status_code, response.headers, raw)


def openai_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-test", "stream": True, "messages": messages, **extra}


def anthropic_body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": True,
        "messages": messages,
        **extra,
    }


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", text=text)


# A conversation with every message kind: the round trip through each format must keep it.
DEPLOY_SCHEMA = {"type": "object", "properties": {"version": {"type": "string"}}}
CONVERSATION = ModelRequest(
    instructions="You are a careful release engineer.",
    messages=[
        user("Ship release 1.4 to production."),
        ChatMessage(
            role="assistant",
            text="Testing first.",
            tool_calls=(
                ToolCallRequest(name="run_tests", arguments="{}", provider_id="call_a1"),
                ToolCallRequest(
                    name="deploy", arguments='{"version":"1.4"}', provider_id="call_b2"
                ),
            ),
        ),
        ChatMessage(role="tool", text="128 passed", tool_call_id="call_a1", tool_name="run_tests"),
        ChatMessage(role="tool", text="deployed", tool_call_id="call_b2", tool_name="deploy"),
        ChatMessage(role="assistant", text="Done."),
        user("Is it live?"),
    ],
    tools=[
        ToolSpec(name="run_tests", description="Run the tests.", parameters={"type": "object"}),
        ToolSpec(name="deploy", description="Deploy a release.", parameters=DEPLOY_SCHEMA),
    ],
)


def to_openai(request: ModelRequest) -> list[dict[str, Any]]:
    """``request`` as Chat Completions messages, per the public format."""
    out: list[dict[str, Any]] = [{"role": "system", "content": request.instructions}]
    for m in request.messages:
        if m.role == "assistant" and m.tool_calls:
            calls = [
                {
                    "id": c.provider_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": m.text or None, "tool_calls": calls})
        elif m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text})
        else:
            out.append({"role": m.role, "content": m.text})
    return out


def openai_tools(request: ModelRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in request.tools
    ]


def to_anthropic(request: ModelRequest) -> list[dict[str, Any]]:
    """``request`` as Messages messages, per the public format: tool results travel as
    ``tool_result`` blocks in a user message, same-role neighbours share a message."""
    out: list[dict[str, Any]] = []
    for m in request.messages:
        if m.role == "assistant":
            role = "assistant"
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [
                {
                    "type": "tool_use",
                    "id": c.provider_id,
                    "name": c.name,
                    "input": json.loads(c.arguments),
                }
                for c in m.tool_calls
            ]
        elif m.role == "tool":
            role = "user"
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id,
                    "content": [{"type": "text", "text": m.text}],
                }
            ]
        else:
            role, blocks = "user", [{"type": "text", "text": m.text}]
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    return out


def anthropic_tools(request: ModelRequest) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in request.tools
    ]
