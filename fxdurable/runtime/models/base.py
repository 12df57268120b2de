"""The model boundary: a request in, a stream of parts out, ending in a :class:`Finish`.

The runtime records the response when it sees ``Finish`` and stops reading: streams lie about
their end (DESIGN §9), so nothing waits for the close.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from fxdurable.core.records import MessageContent, ToolCallRequest, Usage

__all__ = [
    "INTERRUPTED_NOTE",
    "REJECTED_ANSWER_HEADING",
    "TRUNCATING_STOPS",
    "Attachment",
    "ChatMessage",
    "Finish",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OutputFormat",
    "StreamPart",
    "TextDelta",
    "ToolSpec",
    "opens_turn",
    "schema_instructions",
    "without_interruptions",
]

# Stop reasons that mean "cut by the output limit": OpenAI-compatible ``length``, Anthropic
# ``max_tokens`` and ``model_context_window_exceeded`` (the context filled up mid-answer),
# the Responses API's ``incomplete_details.reason`` ``max_output_tokens``.
TRUNCATING_STOPS = frozenset(
    {"length", "max_tokens", "model_context_window_exceeded", "max_output_tokens"}
)


# The user message the model reads right after a reply of its own that a crash cut off
# mid-stream (an ``interrupted`` assistant message): one short note, so it continues.
INTERRUPTED_NOTE = (
    "[Your previous reply was interrupted after the text shown above. Continue from where it "
    "stopped; do not start over.]"
)


# How the user message that rejects a typed final answer begins (runtime/output.py): the
# scripted model's turn goes on past it, as a model's does.
REJECTED_ANSWER_HEADING = "[Your final answer was rejected"


def opens_turn(message: ChatMessage) -> bool:
    """A user message a person wrote, not a note the runtime adds within a turn (after a
    reply a crash cut off, after a rejected typed answer)."""
    return (
        message.role == "user"
        and message.text != INTERRUPTED_NOTE
        and not message.text.startswith(REJECTED_ANSWER_HEADING)
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
    # For role="assistant" without tool calls: the provider's own content, verbatim, when it
    # is more than the text (a paused turn's server-tool blocks). A request in another format
    # than ``content.wire`` sends the text alone.
    content: MessageContent | None = None
    # For role="user" (a prompt) and role="tool" (a call's result): its images and documents,
    # with their bytes loaded from the store (or a URL), in the order given.
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Attachment:
    """An image or a document as a request sends it: ``data`` (the bytes) or ``url``."""

    media_type: str
    data: bytes | None = None
    url: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema, as providers take it


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputFormat:
    """The JSON schema a typed final answer must match (``Agent(output_type=...)``).
    ``strict``: the schema meets the providers' strict mode (every object closed, every
    property required), so it may be enforced by constrained decoding."""

    name: str
    schema: dict[str, Any]
    strict: bool = False


def schema_instructions(output: OutputFormat) -> str:
    """What a model is told of a typed answer where the request cannot enforce the schema."""
    schema = json.dumps(output.schema, separators=(",", ":"), sort_keys=True)
    return (
        "Your final answer (when you call no more tools) must be only a JSON value, no other "
        f"text, that matches this JSON schema:\n{schema}"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    instructions: str
    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] = ()
    # A typed final answer: providers send it as their native structured output.
    output: OutputFormat | None = None
    # The session asking: a provider may key its prompt cache on it (docs/caching.md).
    session_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """``stop_reason`` is the provider's own value, verbatim (``None`` when a model has no
    such notion); ``stop_inferred`` says the provider sent none and it was inferred from the
    content (``tool_calls`` when calls came, else ``stop``)."""

    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    stop_inferred: bool = False
    # The provider's whole assistant content in order, verbatim (Anthropic content blocks):
    # what a continuation after ``pause_turn`` sends back. The calls carry their own share.
    parts: tuple[dict[str, Any], ...] = ()
    # A response without tool calls whose content is more than its text (server-tool blocks,
    # a code-execution container): kept on its message, given back as it came.
    content: MessageContent | None = None

    @property
    def truncated(self) -> bool:
        """Cut by the output limit: the text may stop mid-sentence, the last tool call's
        arguments mid-value."""
        return self.stop_reason is not None and self.stop_reason.lower() in TRUNCATING_STOPS


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
