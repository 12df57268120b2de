"""The model boundary: a request in, a stream of parts out, ending in a :class:`Finish`.

The runtime records the response when it sees ``Finish`` and stops reading: streams lie about
their end (DESIGN §9), so nothing waits for the close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from fxdurable.core.records import ToolCallRequest, Usage

__all__ = [
    "ChatMessage",
    "Finish",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "StreamPart",
    "TextDelta",
    "ToolSpec",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    role: Literal["user", "assistant", "tool"]
    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None  # for role="tool": which call this answers
    tool_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema, as providers take it


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    instructions: str
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class Finish:
    response: ModelResponse


StreamPart: TypeAlias = TextDelta | Finish


class Model(Protocol):
    """A model client. Implementations: scripted (here), OpenAI and Anthropic (httpx)."""

    @property
    def name(self) -> str: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """Yield text deltas, then exactly one :class:`Finish` (anything after is ignored)."""
        ...
