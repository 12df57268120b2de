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
    "INTERRUPTED_NOTE",
    "ChatMessage",
    "Finish",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "StreamPart",
    "TextDelta",
    "ToolSpec",
    "without_interruptions",
]


# The user message the model reads right after a reply of its own that a crash cut off
# mid-stream (an ``interrupted`` assistant message): one short note, so it continues.
INTERRUPTED_NOTE = (
    "[Your previous reply was interrupted after the text shown above. Continue from where it "
    "stopped; do not start over.]"
)


def without_interruptions(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``messages`` without the replies a crash cut off and the notes after them: the
    conversation as if no stream had been cut (what a scripted policy answers)."""
    out: list[ChatMessage] = []
    for message in messages:
        if message.role == "user" and message.text == INTERRUPTED_NOTE:
            if out and out[-1].role == "assistant":
                out.pop()
            continue
        out.append(message)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    role: Literal["user", "assistant", "tool"]
    text: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None  # for role="tool": which call this answers
    tool_name: str | None = None
    # For role="assistant": a reply a crash cut off mid-stream (its text is what had been
    # streamed). Providers send it as an ordinary assistant message.
    interrupted: bool = False


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
