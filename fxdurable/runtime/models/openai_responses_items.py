"""Responses API output items kept verbatim on the recorded calls, and the ``input`` rebuilt.

A response's output items are recorded in order, each as its ``response.output_item.done``
event gave it: ``reasoning`` (its ``id``, ``summary`` and ``encrypted_content``), ``message``
(its ``output_text`` content), ``function_call`` (its ``id``, ``call_id``, ``status``; the
arguments are the recorded call's), and any item type this module does not know. Each call
carries the items from after the previous call up to its own ``function_call`` (the last call
whatever followed it), tagged ``openai-responses``.

Given back: the ``input`` of the next request has those items again, in their order, the
``function_call`` ones rebuilt from the recorded call (its call id, name and arguments), then
one ``function_call_output`` per result. With ``store: false`` OpenAI keeps nothing between
requests, so a reasoning model's ``reasoning`` items (with ``encrypted_content``) must come
back with the calls they led to: without them the API answers 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.attachment_parts import responses_parts
from fxdurable.runtime.models.base import ChatMessage
from fxdurable.runtime.models.wire import CallIds, canonical, short_id

__all__ = ["WIRE", "attach_items", "input_items"]

WIRE = "openai-responses"
_ID_LIMIT = 64  # the API's limit on a call_id


def attach_items(
    calls: Sequence[ToolCallRequest], items: Sequence[dict[str, Any]]
) -> tuple[ToolCallRequest, ...]:
    """``calls`` (in the order of their ``function_call`` items), each carrying its share."""
    if not calls:
        return tuple(calls)
    shares: list[list[dict[str, Any]]] = [[] for _ in calls]
    index = 0
    for item in items:
        kept = dict(item)
        if kept.get("type") == "function_call":
            kept.pop("arguments", None)  # the recorded arguments are the call's
        shares[min(index, len(calls) - 1)].append(kept)
        if kept.get("type") == "function_call":
            index += 1
    return tuple(
        replace(call, wire=WIRE, parts=tuple(share))
        for call, share in zip(calls, shares, strict=True)
    )


def input_items(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The ``input`` of a request: the conversation as Responses API items."""
    out: list[dict[str, Any]] = []
    ids = CallIds(lambda recorded: short_id(recorded, _ID_LIMIT))
    for message in messages:
        if message.role == "user":
            content: str | list[dict[str, Any]] = message.text
            if message.attachments:
                content = responses_parts(message.text, message.attachments)
            out.append({"type": "message", "role": "user", "content": content})
        elif message.role == "assistant":
            out += _assistant(message, ids)
        else:
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": ids.for_result(message.tool_call_id),
                    "output": (
                        responses_parts(message.text, message.attachments)
                        if message.attachments
                        else message.text
                    ),
                }
            )
    return out


def _assistant(message: ChatMessage, ids: CallIds) -> list[dict[str, Any]]:
    calls = message.tool_calls
    if not any(call.wire == WIRE and call.parts for call in calls):
        # Text and calls without items (another provider's records, a plain model): built
        # from what was recorded.
        out = [_text_item(message.text)] if message.text else []
        out += [_call_item({}, call, ids) for call in calls]
        return out
    out = []
    for call in calls:
        own = [canonical(part) for part in call.parts] if call.wire == WIRE else []
        if not any(part.get("type") == "function_call" for part in own):
            own.append({"type": "function_call"})
        for part in own:
            out.append(_call_item(part, call, ids) if part.get("type") == "function_call" else part)
    return out


def _text_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _call_item(kept: dict[str, Any], call: ToolCallRequest, ids: CallIds) -> dict[str, Any]:
    return {
        **kept,
        "type": "function_call",
        "call_id": ids.for_call(call.provider_id),
        "name": call.name,
        "arguments": call.arguments,
    }
