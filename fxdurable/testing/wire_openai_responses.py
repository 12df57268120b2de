"""The OpenAI Responses API on the wire (``POST /v1/responses``), for the scripted model server.

Requests are read back into a :class:`ModelRequest` (``instructions``, then the ``input``
items: messages, ``function_call`` and ``function_call_output`` items; ``reasoning`` items
are checked, not read). Responses are framed as the documented stream: ``event: <type>`` and
``data: {"type": <type>, ..., "sequence_number": n}``, with ``response.created``,
``response.in_progress``, the output items (``response.output_item.added`` / ``.done``, the
message's ``response.output_text.delta`` pieces, the calls'
``response.function_call_arguments.delta`` / ``.done``), then ``response.completed`` with the
usage (``input_tokens_details.cached_tokens``, ``output_tokens_details.reasoning_tokens``),
or ``response.incomplete`` (``max_output_tokens``) when the policy's answer was truncated.
An error inside the stream is an ``error`` event.

The follow-up request is checked as OpenAI checks it, answering 400 with its error shape: a
``function_call_output`` whose ``call_id`` no earlier ``function_call`` has, and, in
reasoning mode (``Quirks(reasoning=True)``, where every response with calls opens with a
``reasoning`` item), a ``function_call`` sent back without its ``reasoning`` item, or with
its ``encrypted_content`` altered. The reasoning is derived from the call ids, so the check
needs no state (``store: false`` means OpenAI keeps none either). ``encrypted_content`` is
only sent when the request's ``include`` asks for ``reasoning.encrypted_content``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec
from fxdurable.testing.wire_attachments import content_parts
from fxdurable.testing.wire_common import (
    Quirks,
    StreamPlan,
    WireError,
    argument_fragments,
    content_text,
    object_list,
    reasoning_for,
    signature_for,
    string_field,
    text_pieces,
)
from fxdurable.testing.wire_openai import OpenAIWire

__all__ = ["OpenAIResponsesWire", "encrypted_for", "reasoning_id"]

_TRUNCATED = frozenset({"length", "max_tokens", "max_output_tokens"})


def reasoning_id(call_ids: Sequence[str | None]) -> str:
    """The id of the reasoning item a reasoning server sends with these calls."""
    digest = hashlib.sha256(json.dumps(list(call_ids)).encode()).hexdigest()
    return f"rs_{digest[:32]}"


def encrypted_for(call_ids: Sequence[str | None]) -> str:
    """Its ``encrypted_content``: opaque bytes a client must send back exactly."""
    plain = reasoning_for(call_ids)
    return base64.b64encode(plain.encode()).decode() + "." + signature_for(plain)


class OpenAIResponsesWire(OpenAIWire):
    name = "openai-responses"
    id_prefix = "call_"
    path = "/v1/responses"

    def parse(self, body: dict[str, Any]) -> ModelRequest:
        instructions = body.get("instructions") or ""
        if not isinstance(instructions, str):
            raise WireError("instructions must be a string")
        raw = body.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
        messages: list[ChatMessage] = []
        names: dict[str, str] = {}
        for i, item in enumerate(object_list(items, "input")):
            where = f"input[{i}]"
            kind = item.get("type", "message")
            if kind == "message":
                role = item.get("role")
                text = content_text(item.get("content"), where)
                if role in ("system", "developer"):
                    instructions = f"{instructions}\n\n{text}".lstrip()
                elif role == "user":
                    text, attachments = content_parts(item.get("content"), f"{where}.content")
                    messages.append(ChatMessage(role="user", text=text, attachments=attachments))
                elif role == "assistant":
                    messages.append(ChatMessage(role=role, text=text))
                else:
                    raise WireError(f"{where}.role: unknown role {role!r}")
            elif kind == "function_call":
                call = ToolCallRequest(
                    name=string_field(item, "name", where),
                    arguments=string_field(item, "arguments", where),
                    provider_id=string_field(item, "call_id", where),
                )
                names[string_field(item, "call_id", where)] = call.name
                last = messages[-1] if messages else None
                if last is not None and last.role == "assistant":
                    messages[-1] = ChatMessage(
                        role="assistant", text=last.text, tool_calls=(*last.tool_calls, call)
                    )
                else:
                    messages.append(ChatMessage(role="assistant", text="", tool_calls=(call,)))
            elif kind == "function_call_output":
                call_id = string_field(item, "call_id", where)
                text, attachments = content_parts(item.get("output"), f"{where}.output")
                messages.append(
                    ChatMessage(
                        role="tool",
                        text=text,
                        tool_call_id=call_id,
                        tool_name=names.get(call_id),
                        attachments=attachments,
                    )
                )
            elif kind != "reasoning":
                raise WireError(f"{where}.type: unknown item type {kind!r}")
        tools = [
            _tool_spec(t, f"tools[{i}]")
            for i, t in enumerate(object_list(body.get("tools") or [], "tools"))
        ]
        return ModelRequest(instructions=instructions, messages=messages, tools=tools)

    def stream(
        self, response: ModelResponse, *, body: dict[str, Any], quirks: Quirks
    ) -> StreamPlan:
        counter = iter(range(1_000_000))
        resp_id = f"resp_{secrets.token_hex(12)}"
        base = {
            "id": resp_id,
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model") or "scripted",
            "store": body.get("store", True),
        }

        def event(kind: str, **fields: Any) -> bytes:
            payload = {"type": kind, **fields, "sequence_number": next(counter)}
            data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
            return f"event: {kind}\ndata: {data}\n\n".encode()

        head = [
            event("response.created", response={**base, "status": "in_progress", "output": []}),
            event("response.in_progress", response={**base, "status": "in_progress"}),
        ]
        output: list[dict[str, Any]] = []
        ids = [call.provider_id for call in response.tool_calls]
        if quirks.reasoning and response.tool_calls:
            item: dict[str, Any] = {"id": reasoning_id(ids), "type": "reasoning", "summary": []}
            head.append(event("response.output_item.added", output_index=len(output), item=item))
            if "reasoning.encrypted_content" in (body.get("include") or ()):
                item = {**item, "encrypted_content": encrypted_for(ids)}
            head.append(event("response.output_item.done", output_index=len(output), item=item))
            output.append(item)
        if response.text:
            index, msg_id = len(output), f"msg_{secrets.token_hex(12)}"
            message: dict[str, Any] = {"id": msg_id, "type": "message", "role": "assistant"}
            message["content"] = []
            head.append(
                event(
                    "response.output_item.added",
                    output_index=index,
                    item={**message, "status": "in_progress"},
                )
            )
            for piece in text_pieces(response.text, quirks):
                head.append(
                    event(
                        "response.output_text.delta",
                        item_id=msg_id,
                        output_index=index,
                        content_index=0,
                        delta=piece,
                    )
                )
            part: dict[str, Any] = {"type": "output_text", "text": response.text}
            part["annotations"] = []
            message = {**message, "status": "completed", "content": [part]}
            head.append(event("response.output_item.done", output_index=index, item=message))
            output.append(message)
        for call in response.tool_calls:
            index, fc_id = len(output), f"fc_{secrets.token_hex(12)}"
            item = {
                "id": fc_id,
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call.provider_id,
                "name": call.name,
            }
            head.append(event("response.output_item.added", output_index=index, item=item))
            for fragment in argument_fragments(call.arguments, quirks):
                head.append(
                    event(
                        "response.function_call_arguments.delta",
                        item_id=fc_id,
                        output_index=index,
                        delta=fragment,
                    )
                )
            sent = "".join(argument_fragments(call.arguments, quirks))
            head.append(
                event(
                    "response.function_call_arguments.done",
                    item_id=fc_id,
                    output_index=index,
                    arguments=sent,
                )
            )
            item = {**item, "status": "completed", "arguments": sent}
            head.append(event("response.output_item.done", output_index=index, item=item))
            output.append(item)
        usage = response.usage
        wire_usage = {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 7 if quirks.reasoning else 0},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        }
        final = {**base, "output": output, "usage": wire_usage, "error": None}
        if (response.stop_reason or "").lower() in _TRUNCATED:
            final |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
            tail = [event("response.incomplete", response=final)]
        else:
            final |= {"status": "completed", "incomplete_details": None}
            tail = [event("response.completed", response=final)]
        return StreamPlan(head, tail)

    def follow_up_error(self, body: dict[str, Any], quirks: Quirks) -> str | None:
        """OpenAI's 400 for this request's ``input``, or None."""
        items = [i for i in body.get("input") or () if isinstance(i, dict)]
        seen: set[object] = set()
        for item in items:
            if item.get("type") == "function_call":
                seen.add(item.get("call_id"))
            elif item.get("type") == "function_call_output" and item.get("call_id") not in seen:
                return (
                    "No tool call found for function call output with call_id "
                    f"{item.get('call_id')}."
                )
        if not quirks.reasoning:
            return None
        # Each run of function_call items (one response's calls) needs the reasoning item of
        # that response before it, since the last output or user message, unchanged.
        group: list[dict[str, Any]] = []
        reasoning: list[dict[str, Any]] = []
        for item in [*items, {"type": "end"}]:
            kind = item.get("type", "message")
            if kind == "function_call":
                group.append(item)
                continue
            if group:
                refused = _reasoning_error(group, reasoning)
                if refused is not None:
                    return refused
                group, reasoning = [], []
            if kind == "reasoning":
                reasoning.append(item)
            elif kind != "message" or item.get("role") != "assistant":
                reasoning = []
        return None

    def stream_error(self, detail: str = "") -> bytes:
        payload = {
            "type": "error",
            "code": "server_error",
            "message": detail or "The server had an error while streaming.",
            "param": None,
            "sequence_number": 0,
        }
        return f"event: error\ndata: {json.dumps(payload)}\n\n".encode()


def _reasoning_error(group: list[dict[str, Any]], reasoning: list[dict[str, Any]]) -> str | None:
    call_ids = [item.get("call_id") for item in group]
    wanted = reasoning_id(call_ids)
    found = [r for r in reasoning if r.get("id") == wanted]
    if not found:
        return (
            f"Item '{group[0].get('id')}' of type 'function_call' was provided without its "
            f"required 'reasoning' item: '{wanted}'."
        )
    if found[0].get("encrypted_content") != encrypted_for(call_ids):
        return (
            f"The encrypted content for item {wanted} could not be verified. Reason: "
            "Encrypted content could not be decrypted or parsed."
        )
    return None


def _tool_spec(tool: dict[str, Any], where: str) -> ToolSpec:
    if tool.get("type") != "function":
        raise WireError(f"{where}: only function tools are understood")
    parameters = tool.get("parameters") or {}
    description = tool.get("description") or ""
    if not isinstance(parameters, dict) or not isinstance(description, str):
        raise WireError(f"{where}: bad description or parameters")
    return ToolSpec(
        name=string_field(tool, "name", where), description=description, parameters=parameters
    )
