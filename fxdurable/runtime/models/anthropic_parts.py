"""Anthropic content blocks kept verbatim, and given back as the API expects them.

A response's blocks are recorded in order, each as the API sent it with its streamed deltas
folded in: ``thinking`` (its text and ``signature``), ``redacted_thinking`` (its ``data``),
``server_tool_use`` and its result blocks (``web_search_tool_result``,
``code_execution_tool_result``, ...), ``text`` (with ``citations``), ``tool_use``; fields this
module does not know are kept. Each client tool call carries the blocks from after the
previous call up to its own ``tool_use`` (and the last call whatever followed it): the
journal records calls as they are, so the blocks are in the journal with them.

Given back: an assistant message whose calls carry blocks is sent as exactly those blocks,
the ``tool_use`` ones rebuilt from the recorded call (its id, name and arguments). Extended
thinking needs that: the thinking blocks of the last assistant turn, unchanged, before its
``tool_use`` when the turn goes on after ``tool_result``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.runtime.models.wire import canonical, decode_arguments

__all__ = ["WIRE", "Block", "assistant_blocks", "attach_parts", "block_part", "plain_text"]

WIRE = "anthropic"
# Blocks whose input streams as ``input_json_delta`` without being a client call.
_INPUT_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use"})


@dataclass(slots=True)
class Block:
    kind: str
    start: dict[str, Any] = field(default_factory=dict)  # content_block_start, verbatim
    id: str | None = None
    name: str = ""
    start_input: str = ""  # the input content_block_start gave, when no deltas follow
    parts: list[str] = field(default_factory=list)  # input_json_delta fragments
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    signature: str | None = None
    citations: list[Any] = field(default_factory=list)


def block_part(block: Block) -> dict[str, Any]:
    """The block as the API sent it, deltas folded in (a ``tool_use`` without its input: the
    recorded arguments are the input)."""
    part = dict(block.start)
    if block.kind == "tool_use":
        part.pop("input", None)
    elif block.kind == "text":
        part["text"] = str(part.get("text") or "") + "".join(block.text)
        if block.citations:
            part["citations"] = [*(part.get("citations") or ()), *block.citations]
    elif block.kind == "thinking":
        part["thinking"] = str(part.get("thinking") or "") + "".join(block.thinking)
        if block.signature is not None:
            part["signature"] = block.signature
    elif block.kind in _INPUT_BLOCKS and block.parts:
        try:
            part["input"] = decode_arguments("".join(block.parts))
        except ValueError:
            part["input"] = {}
    return part


def attach_parts(
    calls: Sequence[ToolCallRequest], parts: Sequence[dict[str, Any]]
) -> tuple[ToolCallRequest, ...]:
    """``calls`` (in the order of their ``tool_use`` blocks in ``parts``), each carrying its
    share of the blocks."""
    if not calls or _plain(parts):
        return tuple(calls)
    shares: list[list[dict[str, Any]]] = [[] for _ in calls]
    index = 0
    for part in parts:
        shares[min(index, len(calls) - 1)].append(part)
        if part.get("type") == "tool_use":
            index += 1
    return tuple(
        replace(call, wire=WIRE, parts=tuple(share))
        for call, share in zip(calls, shares, strict=True)
    )


def _plain(parts: Sequence[dict[str, Any]]) -> bool:
    """Text then tool calls and nothing else: the message rebuilt from the recorded text and
    calls is these very blocks, so nothing more is kept (records stay as they were)."""
    seen_call = False
    for part in parts:
        kind = part.get("type")
        if kind == "text" and set(part) <= {"type", "text"} and not seen_call:
            continue
        if kind == "tool_use" and set(part) <= {"type", "id", "name"}:
            seen_call = True
            continue
        return False
    return True


def plain_text(parts: Sequence[dict[str, Any]]) -> bool:
    """Text blocks and nothing else: the message rebuilt from the recorded text is these
    very blocks, so a response without tool calls keeps nothing more."""
    return all(part.get("type") == "text" and set(part) <= {"type", "text"} for part in parts)


def assistant_blocks(
    calls: Sequence[ToolCallRequest],
    tool_use: Callable[[ToolCallRequest], dict[str, Any]],
) -> list[dict[str, Any]] | None:
    """The content of an assistant message whose calls carry Anthropic blocks, else None
    (the caller builds it from the text and the calls). ``tool_use`` makes a call's block."""
    if not any(call.wire == WIRE and call.parts for call in calls):
        return None
    blocks: list[dict[str, Any]] = []
    for call in calls:
        own = [canonical(part) for part in call.parts] if call.wire == WIRE else []
        if not any(part.get("type") == "tool_use" for part in own):
            own.append({"type": "tool_use"})
        for part in own:
            if part.get("type") == "tool_use":
                blocks.append({**part, **tool_use(call)})
            elif part.get("type") == "text" and not part.get("text"):
                continue  # the API refuses empty text blocks
            else:
                blocks.append(part)
    return blocks


def start_input(content: dict[str, Any]) -> str:
    """The input a whole ``tool_use`` block gave, as compact text (the API's form)."""
    start = content.get("input")
    if isinstance(start, dict) and start:
        return json.dumps(start, separators=(",", ":"), ensure_ascii=False)
    return ""
