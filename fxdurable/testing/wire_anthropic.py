"""Anthropic Messages on the wire, for the scripted model server.

Requests are read back into a :class:`ModelRequest` (``system`` becomes the instructions; each
text block of a user message becomes a user message and each ``tool_result`` block a tool
message, named after the ``tool_use`` it answers; ``tool_use.input`` becomes compact JSON
arguments). Responses are framed as the public streaming format: ``event: <type>`` /
``data: {json}`` pairs — ``message_start`` (with the input tokens), an optional ``ping``, one
``content_block_start``/``content_block_delta``/``content_block_stop`` run per text or
``tool_use`` block (``text_delta``, ``input_json_delta``), ``message_delta`` (stop reason,
output tokens) and ``message_stop``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec
from fxdurable.testing.wire_attachments import content_parts, read_part
from fxdurable.testing.wire_common import (
    ErrorKind,
    Quirks,
    StreamPlan,
    WireError,
    argument_fragments,
    content_text,
    object_list,
    reasoning_for,
    signature_for,
    sse,
    string_field,
    text_pieces,
)

__all__ = ["AnthropicWire"]

_MESSAGES: dict[ErrorKind, tuple[str, str]] = {
    # kind: (error type, message)
    "bad_request": ("invalid_request_error", ""),
    "auth": ("authentication_error", "invalid x-api-key"),
    "not_found": ("not_found_error", ""),
    "context_length": ("invalid_request_error", ""),
    "policy": ("api_error", ""),
    "rate_limited": (
        "rate_limit_error",
        "Number of requests has exceeded your per-minute rate limit.",
    ),
    "server_error": ("api_error", "Internal server error"),
    "unavailable": ("api_error", "Service unavailable"),
    "overloaded": ("overloaded_error", "Overloaded"),
    "stream_error": ("overloaded_error", "Overloaded"),
    "disconnect": ("api_error", ""),
    "stall": ("api_error", ""),
}


class AnthropicWire:
    name = "anthropic"
    id_prefix = "toolu_"
    path = "/v1/messages"

    def parse(self, body: dict[str, Any]) -> ModelRequest:
        messages: list[ChatMessage] = []
        names: dict[str, str] = {}  # tool_use id -> tool name, from the assistant's calls
        for i, message in enumerate(object_list(body.get("messages"), "messages")):
            where = f"messages[{i}]"
            role = message.get("role")
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            blocks = object_list(blocks, f"{where}.content")
            if role == "user":
                messages += _user_messages(blocks, names, where)
            elif role == "assistant":
                text: list[str] = []
                calls: list[ToolCallRequest] = []
                for j, block in enumerate(blocks):
                    if block.get("type") == "text":
                        text.append(string_field(block, "text", f"{where}.content[{j}]"))
                    elif block.get("type") == "tool_use":
                        calls.append(_tool_use(block, f"{where}.content[{j}]"))
                names.update((c.provider_id, c.name) for c in calls if c.provider_id)
                messages.append(
                    ChatMessage(role="assistant", text="".join(text), tool_calls=tuple(calls))
                )
            else:
                raise WireError(f"{where}.role: unknown role {role!r}")
        tools = [
            _tool_spec(t, f"tools[{i}]")
            for i, t in enumerate(object_list(body.get("tools") or [], "tools"))
        ]
        instructions = content_text(body.get("system"), "system")
        return ModelRequest(instructions=instructions, messages=messages, tools=tools)

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        return headers.get("x-api-key") == key

    def stream(
        self, response: ModelResponse, *, body: dict[str, Any], quirks: Quirks
    ) -> StreamPlan:
        usage = response.usage
        start = {
            "type": "message_start",
            "message": {
                "id": f"msg_{secrets.token_hex(12)}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model") or "scripted",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    # The API splits the input: uncached, written to the cache, read from it.
                    "input_tokens": usage.input_tokens
                    - usage.cache_creation_tokens
                    - usage.cache_read_tokens,
                    "cache_creation_input_tokens": usage.cache_creation_tokens,
                    "cache_read_input_tokens": usage.cache_read_tokens,
                    "output_tokens": 1,  # as the real API: the final count is in message_delta
                },
            },
        }
        head = [_event(start)]
        if quirks.anthropic_ping:
            head.append(_event({"type": "ping"}))
        index = 0
        ids = [call.provider_id for call in response.tool_calls]
        if quirks.reasoning:
            head += _thinking_blocks(ids, quirks)
            index = 2
        if response.stop_reason == "pause_turn":  # a server tool ran; the turn is paused
            head += _server_tool_blocks(index, response.text)
            index += 2
        if response.text:
            head.append(_block_start(index, {"type": "text", "text": ""}))
            head += [
                _block_delta(index, {"type": "text_delta", "text": piece})
                for piece in text_pieces(response.text, quirks)
            ]
            head.append(_event({"type": "content_block_stop", "index": index}))
            index += 1
        for call in response.tool_calls:
            block = {"type": "tool_use", "id": call.provider_id, "name": call.name}
            head.append(_block_start(index, {**block, "input": {}}))
            # The real API opens with an empty fragment; parsers must not choke on it.
            fragments = ["", *argument_fragments(call.arguments, quirks)]
            head += [
                _block_delta(index, {"type": "input_json_delta", "partial_json": fragment})
                for fragment in fragments
            ]
            head.append(_event({"type": "content_block_stop", "index": index}))
            index += 1
        stop_reason = "tool_use" if response.tool_calls else "end_turn"
        delta: dict[str, Any] = {"stop_sequence": None}
        if response.stop_reason == "pause_turn":
            stop_reason = "pause_turn"
            # The server tool ran in a container the continuation must name (by its id).
            delta["container"] = {
                "id": _container_for(_server_tool_id(response.text)),
                "expires_at": "2026-12-31T00:00:00Z",
            }
        tail = [
            _event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, **delta},
                    "usage": {"output_tokens": usage.output_tokens},
                }
            ),
            _event({"type": "message_stop"}),
        ]
        return StreamPlan(head, tail)

    def follow_up_error(self, body: dict[str, Any], quirks: Quirks) -> str | None:
        """Why the API would refuse this request's history, as its 400 says, or None: the
        last assistant message's thinking when it has ``tool_use`` blocks (``reasoning``),
        and a paused turn's server-tool blocks sent back without their results."""
        messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
        assistant = [(i, m) for i, m in enumerate(messages) if m.get("role") == "assistant"]
        if not assistant:
            return None
        at, last = assistant[-1]
        blocks = [b for b in last.get("content") or () if isinstance(b, dict)]
        if at == len(messages) - 1:  # a paused turn's continuation names its container
            servers = [b.get("id") for b in blocks if b.get("type") == "server_tool_use"]
            if servers and body.get("container") != _container_for(str(servers[-1])):
                return (
                    "container: the id of the container the paused turn ran in is required "
                    f"to continue it (expected {_container_for(str(servers[-1]))!r}, got "
                    f"{body.get('container')!r})"
                )
        results = {b.get("tool_use_id") for b in blocks if b.get("type") == _SEARCH_RESULT}
        for block in blocks:
            if block.get("type") == "server_tool_use" and block.get("id") not in results:
                return (
                    f"messages.{at}: `web_search` tool use with id {block.get('id')!r} was "
                    f"found without a corresponding `{_SEARCH_RESULT}` block"
                )
        ids = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if not quirks.reasoning or not ids:
            return None
        if [b.get("type") for b in blocks[:2]] != ["thinking", "redacted_thinking"]:
            return (
                f"messages.{at}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                "but found `tool_use`. When `thinking` is enabled, a final `assistant` "
                "message must start with a thinking block"
            )
        # Each thinking block as issued: its signature signs its text, and the redacted
        # block after it is the one issued with it (a paused turn has a pair per piece).
        for j, block in enumerate(blocks):
            if block.get("type") != "thinking":
                continue
            issued = _thinking_pair(str(block.get("thinking")))
            if blocks[j : j + 2] != issued:
                return f"messages.{at}.content.{j}: Invalid `signature` in `thinking` block"
        return None

    def error(self, kind: ErrorKind, detail: str = "") -> dict[str, Any]:
        type_, message = _MESSAGES[kind]
        return {"type": "error", "error": {"type": type_, "message": detail or message}}

    def context_error(self, size: int, limit: int) -> dict[str, Any]:
        return self.error("context_length", f"prompt is too long: {size} tokens > {limit} maximum")

    def stream_error(self, detail: str = "") -> bytes:
        return _event(self.error("stream_error", detail))


_SEARCH_RESULT = "web_search_tool_result"


def _thinking_pair(thinking: str) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": thinking, "signature": signature_for(thinking)},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy" + signature_for(thinking)[:24]},
    ]


def _thinking_blocks(ids: list[str | None], quirks: Quirks) -> list[bytes]:
    thinking, redacted = _thinking_pair(reasoning_for(ids))
    events = [_block_start(0, {"type": "thinking", "thinking": "", "signature": ""})]
    events += [
        _block_delta(0, {"type": "thinking_delta", "thinking": piece})
        for piece in text_pieces(thinking["thinking"], quirks)
    ]
    events.append(_block_delta(0, {"type": "signature_delta", "signature": thinking["signature"]}))
    events.append(_event({"type": "content_block_stop", "index": 0}))
    events.append(_block_start(1, redacted))
    events.append(_event({"type": "content_block_stop", "index": 1}))
    return events


def _server_tool_id(query: str) -> str:
    return "srvtoolu_" + signature_for(query).replace("+", "").replace("/", "")[:20]


def _container_for(tool_id: str) -> str:
    """The container a paused turn's server tool ran in, derived from its id: a server that
    holds no state (a recovery starts a fresh one) still knows which one a continuation names."""
    return "container_" + signature_for(tool_id).replace("+", "").replace("/", "")[:16]


def _server_tool_blocks(index: int, query: str) -> list[bytes]:
    """A web search the API ran itself: its ``server_tool_use`` (input streamed) and result."""
    tool_id = _server_tool_id(query)
    use = {"type": "server_tool_use", "id": tool_id, "name": "web_search", "input": {}}
    result = {
        "type": _SEARCH_RESULT,
        "tool_use_id": tool_id,
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.com/result",
                "title": "A result",
                "encrypted_content": signature_for(tool_id),
                "page_age": None,
            }
        ],
    }
    partial = json.dumps({"query": query or "search"})
    return [
        _block_start(index, use),
        _block_delta(index, {"type": "input_json_delta", "partial_json": partial}),
        _event({"type": "content_block_stop", "index": index}),
        _block_start(index + 1, result),
        _event({"type": "content_block_stop", "index": index + 1}),
    ]


def _event(data: dict[str, Any]) -> bytes:
    return sse(data, event=str(data["type"]))


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return _event({"type": "content_block_start", "index": index, "content_block": block})


def _block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return _event({"type": "content_block_delta", "index": index, "delta": delta})


def _user_messages(
    blocks: list[dict[str, Any]], names: Mapping[str, str], where: str
) -> list[ChatMessage]:
    """Tool results and user texts, in block order. Each text block is one user message:
    clients merge same-role neighbours into one message's blocks, as the API wants."""
    out: list[ChatMessage] = []
    for j, block in enumerate(blocks):
        here = f"{where}.content[{j}]"
        if block.get("type") == "text":
            out.append(ChatMessage(role="user", text=string_field(block, "text", here)))
        elif block.get("type") in ("image", "document"):  # the prompt's, after its text
            attachment = read_part(block, here)
            if out and out[-1].role == "user":
                out[-1] = replace(out[-1], attachments=(*out[-1].attachments, attachment))
            else:
                out.append(ChatMessage(role="user", text="", attachments=(attachment,)))
        elif block.get("type") == "tool_result":
            call_id = string_field(block, "tool_use_id", here)
            text, attachments = content_parts(block.get("content"), f"{here}.content")
            out.append(
                ChatMessage(
                    role="tool",
                    text=text,
                    tool_call_id=call_id,
                    tool_name=names.get(call_id),
                    attachments=attachments,
                )
            )
    return out


def _tool_use(block: dict[str, Any], where: str) -> ToolCallRequest:
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise WireError(f"{where}.input must be an object")
    raw = arguments.get("_raw_arguments")
    if isinstance(raw, str) and len(arguments) == 1:
        text = raw  # arguments that were not a JSON object, as the fxdurable client wraps them
    else:
        # Compact, in the client's key order: the form fxdurable records arguments in.
        text = json.dumps(arguments, separators=(",", ":"))
    return ToolCallRequest(
        name=string_field(block, "name", where),
        arguments=text,
        provider_id=string_field(block, "id", where),
    )


def _tool_spec(tool: dict[str, Any], where: str) -> ToolSpec:
    schema = tool.get("input_schema") or {}
    description = tool.get("description") or ""
    if not isinstance(schema, dict) or not isinstance(description, str):
        raise WireError(f"{where}: bad description or input_schema")
    return ToolSpec(
        name=string_field(tool, "name", where), description=description, parameters=schema
    )
