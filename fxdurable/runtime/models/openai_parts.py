"""Chat-completions fields beyond the answer, kept verbatim and given back.

OpenAI-compatible servers put reasoning on the assistant message in fields of their own:
``reasoning_content`` (DeepSeek, vLLM, Qwen), ``reasoning`` and ``reasoning_details``
(OpenRouter), and attach provider data to tool calls (Gemini's
``extra_content.google.thought_signature``). Whatever a delta carries besides the standard
fields is accumulated as it streams (text concatenated, lists extended, anything else the
last value) and recorded with the calls: the message's fields on the first call, each call's
own on it. An assistant message with tool calls is given back with them: DeepSeek answers 400
to a follow-up after a tool call without its ``reasoning_content``, Gemini to one without
the call's thought signature. Never part of the answer text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.wire import canonical

__all__ = ["WIRE", "Extras", "attach_fields", "call_fields", "given_back", "message_fields"]

WIRE = "openai-chat"
_MESSAGE_KNOWN = frozenset({"role", "content", "refusal", "tool_calls"})
_CALL_KNOWN = frozenset({"index", "id", "type", "function"})
_FUNCTION_KNOWN = frozenset({"name", "arguments"})


class Extras:
    """Fields a stream carries beyond the known ones, accumulated across deltas."""

    def __init__(self, known: frozenset[str]) -> None:
        self._known = known
        self.fields: dict[str, Any] = {}

    def take(self, delta: Mapping[str, Any]) -> None:
        for key, value in delta.items():
            # An empty list or object gives nothing back (``annotations: []``); an empty
            # string is kept: DeepSeek wants ``reasoning_content`` even when it is "".
            if key in self._known or value is None or value == [] or value == {}:
                continue
            held = self.fields.get(key)
            if isinstance(value, str) and isinstance(held, str):
                self.fields[key] = held + value
            elif isinstance(value, list) and isinstance(held, list):
                held.extend(value)
            else:
                self.fields[key] = list(value) if isinstance(value, list) else value

    def merged(self) -> dict[str, Any]:
        out = dict(self.fields)
        details = out.get("reasoning_details")
        if isinstance(details, list):
            out["reasoning_details"] = _merge_by_index(details)
        return out


def _merge_by_index(items: Sequence[Any]) -> list[Any]:
    """Streamed ``reasoning_details`` pieces of one item (same ``index``) joined: their
    texts concatenated, other fields as last sent."""
    out: list[Any] = []
    by_index: dict[Any, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, dict) or "index" not in item:
            out.append(item)
            continue
        held = by_index.get(item["index"])
        if held is None:
            held = by_index[item["index"]] = dict(item)
            out.append(held)
            continue
        for key, value in item.items():
            if value is None:
                continue
            if key in ("text", "summary", "data") and isinstance(held.get(key), str):
                held[key] = held[key] + value
            else:
                held[key] = value
    return out


def message_fields() -> Extras:
    return Extras(_MESSAGE_KNOWN)


def call_fields() -> tuple[Extras, Extras]:
    """The call's own fields and its ``function``'s."""
    return Extras(_CALL_KNOWN), Extras(_FUNCTION_KNOWN)


def attach_fields(
    calls: Sequence[ToolCallRequest],
    message: Mapping[str, Any],
    per_call: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> tuple[ToolCallRequest, ...]:
    out: list[ToolCallRequest] = []
    for index, call in enumerate(calls):
        part: dict[str, Any] = {}
        if index == 0 and message:
            part["message"] = dict(message)
        if index < len(per_call):
            own, function = per_call[index]
            if own:
                part["call"] = dict(own)
            if function:
                part["function"] = dict(function)
        out.append(replace(call, wire=WIRE, parts=(part,)) if part else call)
    return tuple(out)


def given_back(calls: Sequence[ToolCallRequest]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The message's kept fields, and each call's (``call``, ``function``) merged as one
    dict per call with a ``function`` key: what :func:`build_openai_body` adds."""
    message: dict[str, Any] = {}
    per_call: list[dict[str, Any]] = []
    for call in calls:
        own: dict[str, Any] = {}
        if call.wire == WIRE:
            for part in call.parts:
                message.update(_object(part.get("message")))
                own.update(_object(part.get("call")))
                if function := _object(part.get("function")):
                    own["function"] = function
        per_call.append(own)
    return message, per_call


def _object(value: object) -> dict[str, Any]:
    return canonical(value) if isinstance(value, Mapping) else {}
