"""What a person may read of a model's reasoning: the thinking text and summaries in the
provider's own parts, for the trace and the console to show collapsed, never as answer text.

The parts stay in the journal verbatim (docs/reasoning.md); this reads them, it changes
nothing. Signed or encrypted reasoning with no readable text (Anthropic's
``redacted_thinking``, a Responses ``reasoning`` item without a summary) is counted, not shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from fxdurable.core.records import ToolCallRequest

__all__ = ["THINKING_SHOWN_MAX", "Thinking", "thinking_of"]

# The most of it an event carries (the journal keeps it all): reasoning runs to many
# thousands of tokens, and every stream reader would receive it.
THINKING_SHOWN_MAX = 4000


@dataclass(frozen=True, slots=True)
class Thinking:
    text: str = ""  # readable reasoning, pieces joined by a blank line; "" when none
    hidden: int = 0  # pieces with no readable text (redacted, encrypted only)

    def shown(self) -> str | None:
        """The text as an event carries it (cut to THINKING_SHOWN_MAX), or None."""
        if not self.text:
            return None
        if len(self.text) <= THINKING_SHOWN_MAX:
            return self.text
        cut = len(self.text) - THINKING_SHOWN_MAX
        return f"{self.text[:THINKING_SHOWN_MAX]}… ({cut} more characters in the journal)"


def thinking_of(
    calls: Iterable[ToolCallRequest], content: Iterable[tuple[str | None, Mapping[str, Any]]] = ()
) -> Thinking:
    """The reasoning of one response: in its tool calls' parts, and in ``content`` (a response
    without calls: its own parts, each with the wire that wrote it)."""
    pieces: list[tuple[str | None, Mapping[str, Any]]] = [
        (call.wire, part) for call in calls for part in call.parts
    ]
    pieces += list(content)
    texts: list[str] = []
    hidden = 0
    for wire, part in pieces:
        readable, unreadable = _read(wire, part)
        texts += [t for t in readable if t.strip()]
        hidden += unreadable
    return Thinking("\n\n".join(texts), hidden)


def _read(wire: str | None, part: Mapping[str, Any]) -> tuple[list[str], int]:
    kind = part.get("type")
    if wire == "anthropic":
        if kind == "thinking":
            return [_text(part.get("thinking"))], 0
        return ([], 1) if kind == "redacted_thinking" else ([], 0)
    if wire == "openai-responses":
        if kind != "reasoning":
            return [], 0
        summary = [_text(s.get("text")) for s in _list(part.get("summary")) if _is_map(s)]
        content = [_text(c.get("text")) for c in _list(part.get("content")) if _is_map(c)]
        readable = [t for t in summary + content if t]
        return (readable, 0) if readable else ([], 1)
    if wire == "openai-chat":
        message = part.get("message")
        if not _is_map(message):
            return [], 0
        readable = [_text(message.get(f)) for f in ("reasoning_content", "reasoning")]
        for detail in _list(message.get("reasoning_details")):
            if _is_map(detail):
                readable += [_text(detail.get("text")), _text(detail.get("summary"))]
        readable = [t for t in readable if t]
        encrypted = any(
            _is_map(d) and d.get("type") == "reasoning.encrypted"
            for d in _list(message.get("reasoning_details"))
        )
        return readable, int(encrypted and not readable)
    return [], 0


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping)
