"""OpenAI Chat Completions on the wire, for the scripted model server.

Requests are read back into a :class:`ModelRequest` (system/developer messages become the
instructions; a ``tool`` message gets its tool name from the assistant call it answers).
Responses are framed as the public streaming format: ``data: {chunk}`` lines whose
``choices[0].delta`` carries the role, text pieces and ``tool_calls`` fragments, a chunk with
``finish_reason``, the usage chunk (``choices: []``) when ``stream_options.include_usage`` is
set, then ``data: [DONE]``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec
from fxdurable.testing.wire_attachments import content_parts
from fxdurable.testing.wire_common import (
    ErrorKind,
    Quirks,
    StreamPlan,
    WireError,
    argument_fragments,
    content_text,
    interleave,
    object_list,
    reasoning_for,
    signature_for,
    sse,
    string_field,
    text_pieces,
)

__all__ = ["OpenAIWire"]

_MESSAGES: dict[ErrorKind, tuple[str, str | None, str]] = {
    # kind: (type, code, message)
    "bad_request": ("invalid_request_error", None, ""),
    "auth": (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided. You can find your API key in your account settings.",
    ),
    "not_found": ("invalid_request_error", "unknown_url", ""),
    "context_length": ("invalid_request_error", "context_length_exceeded", ""),
    "policy": ("server_error", None, ""),
    "rate_limited": (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again later.",
    ),
    "server_error": (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    "unavailable": (
        "server_error",
        None,
        "The engine is currently overloaded, please try again later.",
    ),
    "overloaded": ("server_error", "overloaded", "The server is overloaded."),
    "stream_error": ("server_error", None, "The server had an error while streaming."),
    "disconnect": ("server_error", None, ""),
    "stall": ("server_error", None, ""),
}


class OpenAIWire:
    name = "openai"
    id_prefix = "call_"
    path = "/v1/chat/completions"

    def parse(self, body: dict[str, Any]) -> ModelRequest:
        instructions: list[str] = []
        messages: list[ChatMessage] = []
        names: dict[str, str] = {}  # tool_call_id -> tool name, from the assistant's calls
        for i, message in enumerate(object_list(body.get("messages"), "messages")):
            where = f"messages[{i}]"
            role = message.get("role")
            text = content_text(message.get("content"), where)
            if role in ("system", "developer"):
                instructions.append(text)
            elif role == "user":
                text, attachments = content_parts(message.get("content"), f"{where}.content")
                messages.append(ChatMessage(role="user", text=text, attachments=attachments))
            elif role == "assistant":
                calls = tuple(
                    _tool_call(c, f"{where}.tool_calls[{j}]")
                    for j, c in enumerate(object_list(message.get("tool_calls") or [], where))
                )
                names.update((c.provider_id, c.name) for c in calls if c.provider_id)
                messages.append(ChatMessage(role="assistant", text=text, tool_calls=calls))
            elif role == "tool":
                call_id = string_field(message, "tool_call_id", where)
                name = names.get(call_id) or message.get("name")
                messages.append(
                    ChatMessage(
                        role="tool",
                        text=text,
                        tool_call_id=call_id,
                        tool_name=name if isinstance(name, str) else None,
                    )
                )
            else:
                raise WireError(f"{where}.role: unknown role {role!r}")
        tools = [
            _tool_spec(t, f"tools[{i}]")
            for i, t in enumerate(object_list(body.get("tools") or [], "tools"))
        ]
        return ModelRequest(instructions="\n\n".join(instructions), messages=messages, tools=tools)

    def authorized(self, headers: Mapping[str, str], key: str) -> bool:
        return headers.get("authorization") == f"Bearer {key}"

    def stream(
        self, response: ModelResponse, *, body: dict[str, Any], quirks: Quirks
    ) -> StreamPlan:
        usage = response.usage
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        base: dict[str, Any] = {
            "id": f"chatcmpl-{secrets.token_hex(12)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or "scripted",
            "system_fingerprint": None,
        }
        if include_usage:
            base["usage"] = None  # every chunk carries it; only the last has a value

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "choices": [choice]}

        head = [sse(chunk({"role": "assistant", "content": ""}))]
        ids = [call.provider_id for call in response.tool_calls]
        if quirks.reasoning:  # DeepSeek's thinking mode: reasoning first, content null
            head += [
                sse(chunk({"content": None, "reasoning_content": piece}))
                for piece in text_pieces(reasoning_for(ids), quirks)
            ]
        head += [sse(chunk({"content": piece})) for piece in text_pieces(response.text, quirks)]
        per_call: list[list[dict[str, Any]]] = []
        for index, call in enumerate(response.tool_calls):
            opening = {
                "index": index,
                "id": call.provider_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            if quirks.reasoning:  # Gemini's OpenAI-compatible thought signature
                opening["extra_content"] = _signature_field(call.provider_id)
            fragments = [
                {"index": index, "function": {"arguments": fragment}}
                for fragment in argument_fragments(call.arguments, quirks)
            ]
            per_call.append([opening, *fragments])
        if quirks.interleave_parallel:
            ordered = [delta for _, delta in interleave(per_call)]
        else:
            ordered = [delta for deltas in per_call for delta in deltas]
        head += [sse(chunk({"tool_calls": [delta]})) for delta in ordered]

        wire_usage = {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": 5 if quirks.reasoning else 0},
        }
        finish = chunk({}, "tool_calls" if response.tool_calls else "stop")
        tail: list[bytes] = []
        if include_usage and not quirks.usage_last:
            tail.append(sse({**finish, "usage": wire_usage}))
        else:
            tail.append(sse(finish))
        if include_usage and quirks.usage_last:
            tail.append(sse({**base, "choices": [], "usage": wire_usage}))
        if not quirks.omit_done:
            tail.append(sse("[DONE]"))
        return StreamPlan(head, tail)

    def follow_up_error(self, body: dict[str, Any], quirks: Quirks) -> str | None:
        """Why a reasoning server would refuse this request's history (``reasoning``), as
        its 400 says, or None: an assistant message with tool calls must carry its
        ``reasoning_content`` (DeepSeek) and each call its thought signature (Gemini), as
        they were sent."""
        if not quirks.reasoning:
            return None
        for i, message in enumerate(body.get("messages") or ()):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
            if not calls:
                continue
            if message.get("reasoning_content") != reasoning_for([c.get("id") for c in calls]):
                return (
                    "The reasoning_content in the thinking mode must be passed back to the "
                    f"API. (messages[{i}])"
                )
            for j, call in enumerate(calls):
                if call.get("extra_content") != _signature_field(call.get("id")):
                    return (
                        f"Function call is missing a thought_signature in functionCall parts "
                        f"(messages[{i}].tool_calls[{j}])"
                    )
        return None

    def error(self, kind: ErrorKind, detail: str = "") -> dict[str, Any]:
        type_, code, message = _MESSAGES[kind]
        return {
            "error": {
                "message": detail or message,
                "type": type_,
                "param": "messages" if kind == "context_length" else None,
                "code": code,
            }
        }

    def context_error(self, size: int, limit: int) -> dict[str, Any]:
        return self.error(
            "context_length",
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {size} tokens. Please reduce the length of the messages.",
        )

    def stream_error(self, detail: str = "") -> bytes:
        return sse(self.error("stream_error", detail))


def _signature_field(call_id: object) -> dict[str, Any]:
    return {"google": {"thought_signature": signature_for(f"call {call_id}")}}


def _tool_call(call: dict[str, Any], where: str) -> ToolCallRequest:
    function = call.get("function")
    if not isinstance(function, dict):
        raise WireError(f"{where}.function must be an object")
    call_id = call.get("id")
    return ToolCallRequest(
        name=string_field(function, "name", f"{where}.function"),
        arguments=string_field(function, "arguments", f"{where}.function"),
        provider_id=call_id if isinstance(call_id, str) else None,
    )


def _tool_spec(tool: dict[str, Any], where: str) -> ToolSpec:
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict):
        raise WireError(f"{where}: only function tools are understood")
    parameters = function.get("parameters") or {}
    description = function.get("description") or ""
    if not isinstance(parameters, dict) or not isinstance(description, str):
        raise WireError(f"{where}.function: bad description or parameters")
    return ToolSpec(
        name=string_field(function, "name", f"{where}.function"),
        description=description,
        parameters=parameters,
    )
