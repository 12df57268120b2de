"""What the two wire formats of the scripted model server share: the quirk switches, the
failures, the shape a format module fills in (:class:`Wire`), and the helpers that apply the
quirks to a scripted response before it is framed as an OpenAI or Anthropic stream.

Each switch mimics something a real model or gateway does (DESIGN §6, §9). They are plain
frozen values: a test swaps them between requests with ``server.quirks = Quirks(...)``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

from fxdurable.core.records import Usage
from fxdurable.runtime.models.base import ModelRequest, ModelResponse

__all__ = [
    "ERROR_STATUS",
    "ErrorKind",
    "Failure",
    "FailureKind",
    "Quirks",
    "StreamPlan",
    "Wire",
    "WireError",
    "argument_fragments",
    "as_streamed",
    "content_text",
    "context_chars",
    "interleave",
    "object_list",
    "reasoning_for",
    "signature_for",
    "sse",
    "string_field",
    "text_pieces",
]

T = TypeVar("T")

FailureKind: TypeAlias = Literal[
    "rate_limited",  # 429 (with Retry-After when ``retry_after`` is set)
    "server_error",  # 500
    "unavailable",  # 503
    "overloaded",  # 529 with an ``overloaded_error`` body (Anthropic's; same status for OpenAI)
    "stream_error",  # 200, half the stream, then an error event, then a clean end
    "disconnect",  # 200, half the stream, then the socket is cut (an incomplete body)
    "stall",  # nothing at all for ``stall_s`` seconds, then the socket is closed
]


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed request. ``retry_after`` is sent verbatim as the ``Retry-After`` header
    (seconds, e.g. ``"2"``, or an HTTP date) on the HTTP-status kinds."""

    kind: FailureKind
    retry_after: str | None = None
    stall_s: float = 5.0

    @property
    def status(self) -> int:
        """The HTTP status answered (200 for the mid-stream kinds, 0 for a stall)."""
        return ERROR_STATUS[self.kind]

    @property
    def mid_stream(self) -> bool:
        return self.kind in ("stream_error", "disconnect")


@dataclass(frozen=True, slots=True, kw_only=True)
class Quirks:
    """The server's switches; every default is a polite, well-formed stream.

    - ``text_chunk_chars``: text is streamed in deltas of this many characters.
    - ``pretty_arguments``: tool-call arguments are re-serialised with ``indent=2`` (newlines
      and indentation inside the arguments string), as some models do.
    - ``split_arguments``: arguments are streamed in fragments of this many characters
      (0: one fragment per call).
    - ``interleave_parallel``: several tool calls in one response have their argument
      fragments interleaved by index (OpenAI only; Anthropic content blocks are sequential).
    - ``usage_last``: OpenAI, when ``stream_options.include_usage`` is asked for: usage comes
      in its own chunk with ``choices: []`` after the finish chunk (the real API's order);
      off, it rides on the finish chunk (as some compatible servers do).
    - ``omit_done``: OpenAI: no ``data: [DONE]`` line.
    - ``hold_open_after_finish_s``: after the last event the response stays open, no bytes
      and no end, for this long (or until the server stops).
    - ``chunk_bytes``: the body is written in HTTP chunks of this many bytes, each flushed
      (1: one-byte chunks); 0: one chunk per event. ``chunk_delay_s`` sleeps between them.
    - ``event_delay_s``: sleep before each event (room to crash a client mid-stream).
    - ``anthropic_ping``: a ``ping`` event after ``message_start``.
    - ``fail_first``: the next requests fail, one failure each, in order, then all succeed.
      Setting ``server.quirks`` re-arms the list.
    - ``context_limit_chars``: a request whose instructions, message texts and tool-call
      arguments add up to more characters than this gets the provider's context-length 400.
    - ``reasoning``: a reasoning model. Anthropic: each response opens with a ``thinking``
      block (``thinking_delta`` pieces, then one ``signature_delta``) and a
      ``redacted_thinking`` block, and a request whose last assistant message has
      ``tool_use`` blocks is refused (400) unless it starts with those two blocks unchanged.
      OpenAI: ``reasoning_content`` deltas before the answer (DeepSeek) and a Gemini thought
      signature (``extra_content``) on each tool call, and a request is refused (400) when an
      assistant message with tool calls lacks its ``reasoning_content`` or a call its
      signature, or either was altered. The reasoning is derived from the call ids, so the
      check needs no state and survives a restart of the server.
    - ``require_api_key``: without ``Authorization: Bearer <key>`` (OpenAI) or
      ``x-api-key: <key>`` (Anthropic) the answer is 401.
    - ``prompt_cache``: the provider's prompt cache, played by the server
      (:mod:`fxdurable.testing.prompt_cache_sim`): usage reports the input tokens a request
      read from (and, Anthropic, wrote to) the cache.
    """

    text_chunk_chars: int = 16
    pretty_arguments: bool = False
    split_arguments: int = 0
    interleave_parallel: bool = False
    usage_last: bool = True
    omit_done: bool = False
    hold_open_after_finish_s: float = 0.0
    chunk_bytes: int = 0
    chunk_delay_s: float = 0.0
    event_delay_s: float = 0.0
    anthropic_ping: bool = True
    fail_first: Sequence[Failure] = field(default=())
    context_limit_chars: int | None = None
    require_api_key: str | None = None
    reasoning: bool = False
    prompt_cache: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "fail_first", tuple(self.fail_first))


def text_pieces(text: str, quirks: Quirks) -> list[str]:
    size = max(1, quirks.text_chunk_chars)
    return [text[i : i + size] for i in range(0, len(text), size)]


def argument_fragments(arguments: str, quirks: Quirks) -> list[str]:
    """The arguments string as streamed: maybe pretty-printed, maybe in small fragments.

    Joined, the fragments are the same JSON value (pretty-printing changes only whitespace
    outside strings); arguments that are not JSON are sent as they are.
    """
    if quirks.pretty_arguments:
        with contextlib.suppress(ValueError):  # not JSON: sent as it is
            arguments = json.dumps(json.loads(arguments), indent=2)
    size = quirks.split_arguments
    if size <= 0 or not arguments:
        return [arguments]
    return [arguments[i : i + size] for i in range(0, len(arguments), size)]


def interleave(per_call: Sequence[Sequence[T]]) -> list[tuple[int, T]]:
    """``(index, item)`` round-robin over the calls: item 0 of each, then item 1, ..."""
    out: list[tuple[int, T]] = []
    longest = max((len(f) for f in per_call), default=0)
    for k in range(longest):
        for index, fragments in enumerate(per_call):
            if k < len(fragments):
                out.append((index, fragments[k]))
    return out


def as_streamed(request: ModelRequest, response: ModelResponse, id_prefix: str) -> ModelResponse:
    """The policy's answer as it goes on the wire: every call has an id (the scripted one, else
    a fresh random one, so ids stay unique across server restarts within one session), and the
    usage is words in, words out: the count :class:`ScriptedModel` reports in process."""
    calls = tuple(
        c if c.provider_id else replace(c, provider_id=f"{id_prefix}{secrets.token_hex(12)}")
        for c in response.tool_calls
    )
    usage = Usage(
        input_tokens=sum(len(m.text.split()) for m in request.messages),
        output_tokens=len(response.text.split()) + len(calls),
    )
    return ModelResponse(
        text=response.text, tool_calls=calls, usage=usage, stop_reason=response.stop_reason
    )


def reasoning_for(call_ids: Sequence[str | None]) -> str:
    """The reasoning a ``reasoning`` server sends with a response making these calls: bytes a
    client must keep exactly (non-ASCII, quotes, backslashes, a newline, trailing space)."""
    named = ", ".join(i or "-" for i in call_ids) or "no calls"
    return f'Considering naïve options ✓ for {named}:\n "quoted" \\ path\\ done '


def signature_for(text: str) -> str:
    """The signature a ``reasoning`` server gives ``text`` (stands in for Anthropic's)."""
    digest = hmac.new(_SIGNING_KEY, text.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest * 3).decode()


_SIGNING_KEY = b"fxdurable scripted reasoning"


def context_chars(request: ModelRequest) -> int:
    """What ``context_limit_chars`` measures."""
    total = len(request.instructions)
    for message in request.messages:
        total += len(message.text) + sum(len(c.arguments) for c in message.tool_calls)
    return total


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line, one ``data:`` line, a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class WireError(ValueError):
    """A request body the format cannot read: answered with the provider's 400."""


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """A response as events. ``head`` is everything before the finish (a mid-stream failure
    cuts into it); ``tail`` is the finish and what follows it."""

    head: list[bytes]
    tail: list[bytes]


ErrorKind: TypeAlias = Literal[
    "bad_request",
    "auth",
    "not_found",
    "context_length",
    "policy",
    "rate_limited",
    "server_error",
    "unavailable",
    "overloaded",
    "stream_error",
    "disconnect",
    "stall",
]
ERROR_STATUS: dict[ErrorKind, int] = {
    "bad_request": 400,
    "auth": 401,
    "not_found": 404,
    "context_length": 400,
    "policy": 500,
    "rate_limited": 429,
    "server_error": 500,
    "unavailable": 503,
    "overloaded": 529,
    "stream_error": 200,
    "disconnect": 200,
    "stall": 0,
}


class Wire(Protocol):
    """One provider format. Implementations: ``OpenAIWire``, ``AnthropicWire``."""

    name: str
    path: str
    id_prefix: str  # of the tool-call ids it hands out

    def parse(self, body: dict[str, Any]) -> ModelRequest: ...

    def authorized(self, headers: Mapping[str, str], key: str) -> bool: ...

    def stream(
        self, response: ModelResponse, *, body: dict[str, Any], quirks: Quirks
    ) -> StreamPlan:
        """``response`` as events; its calls have ids and its usage is set (``as_streamed``)."""
        ...

    def follow_up_error(self, body: dict[str, Any], quirks: Quirks) -> str | None:
        """Why the provider would refuse the history this request sends back (400), or None."""
        ...

    def error(self, kind: ErrorKind, detail: str = "") -> dict[str, Any]:
        """The provider's JSON error body for ``kind`` (``detail`` replaces its message)."""
        ...

    def context_error(self, size: int, limit: int) -> dict[str, Any]:
        """The provider's context-length 400 body."""
        ...

    def stream_error(self, detail: str = "") -> bytes:
        """The error event sent after a 200, mid-stream."""
        ...


def content_text(content: object, where: str) -> str:
    """Text from a message ``content`` that is a string, null, or a list of parts (the text
    parts are joined; images and the like are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, dict):
                raise WireError(f"{where}: content parts must be objects")
            if part.get("type") == "text":
                texts.append(_string(part.get("text"), f"{where}.text"))
        return "".join(texts)
    raise WireError(f"{where}: content must be a string or a list of parts")


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"{where} must be a string")
    return value


def string_field(obj: Mapping[str, Any], key: str, where: str) -> str:
    return _string(obj.get(key), f"{where}.{key}")


def object_list(value: object, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise WireError(f"{where} must be a list of objects")
    return value
