"""Anthropic Messages, streaming.

The response is complete at ``message_stop`` (even when no blank line follows it), or at the
``message_delta`` carrying a ``stop_reason`` followed by at most ``finish_grace_s`` of waiting
for ``message_stop``. Tool input arrives as ``input_json_delta`` fragments per content block
and is kept as the text the model produced. ``ping`` and unknown event types are ignored; an
``error`` event, before or after the ``stop_reason``, fails the call: retryable when transient
(``overloaded_error``, ``api_error``), permanent for ``invalid_request_error``, a
``ContextLengthError`` when the prompt is too long.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpx

from fxdurable.core.records import Usage
from fxdurable.errors import ModelError, ModelRetryableError
from fxdurable.runtime.models.anthropic_parts import (
    Block,
    assistant_blocks,
    attach_parts,
    block_part,
    start_input,
)
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
    StreamPart,
    ToolSpec,
)
from fxdurable.runtime.models.caching import PromptCache, mark_anthropic_body
from fxdurable.runtime.models.errors import redact, stream_error
from fxdurable.runtime.models.http import Timeouts
from fxdurable.runtime.models.httpmodel import HttpModel, StreamParser
from fxdurable.runtime.models.sse import SSEEvent
from fxdurable.runtime.models.wire import (
    CallIds,
    as_dict,
    as_int,
    as_str,
    decode_arguments,
    finish_calls,
    infer_stop,
)

__all__ = ["ANTHROPIC_VERSION", "AnthropicModel", "build_anthropic_body"]

ANTHROPIC_VERSION = "2023-06-01"
_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")  # tool_use ids must match ^[a-zA-Z0-9_-]+$
# Input-token counts as the API splits them: uncached, written to the cache, read from it.
_INPUT_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class AnthropicModel(HttpModel):
    """A Messages API model, configured as the official SDK reads the environment.

    ``base_url`` defaults to ``$FXD_ANTHROPIC_BASE_URL``, then ``$ANTHROPIC_BASE_URL``, then
    ``https://api.anthropic.com`` (empty values count as unset); the key to
    ``$ANTHROPIC_API_KEY``, read at each call."""

    prefix = "anthropic"
    provider = "Anthropic"
    key_env = "ANTHROPIC_API_KEY"
    base_url_envs = ("FXD_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL")
    default_base_url = "https://api.anthropic.com"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        max_pause_continuations: int = 8,
        timeout: Timeouts | float | None = None,
        finish_grace_s: float = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
        prompt_cache: PromptCache | bool | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            finish_grace_s=finish_grace_s,
            transport=transport,
        )
        self._max_tokens = max_tokens
        self._max_pauses = max_pause_continuations
        self._cache = PromptCache.resolve(prompt_cache)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        """As :meth:`HttpModel.stream`, and a turn the API paused (``stop_reason:
        "pause_turn"``, a long server-tool loop) is continued: the paused content goes back as
        the assistant turn, as it was sent, until the model stops for another reason. The
        one :class:`Finish` has every piece's content in order and their usage summed (each
        continuation is billed), so the turn's token totals count them all."""
        paused: list[ModelResponse] = []
        while True:
            asked = _Continued(
                instructions=request.instructions,
                messages=request.messages,
                tools=request.tools,
                paused=tuple(p for r in paused for p in r.parts),
            )
            response: ModelResponse | None = None
            async for part in super().stream(asked):
                if isinstance(part, Finish):
                    response = part.response
                    break
                yield part
            assert response is not None  # HttpModel.stream always ends with a Finish
            if response.stop_reason != "pause_turn":
                yield Finish(_joined([*paused, response]))
                return
            paused.append(response)
            if len(paused) > self._max_pauses:
                raise ModelError(
                    f"{self._label} paused the turn {len(paused)} times (pause_turn); the "
                    f"limit is max_pause_continuations={self._max_pauses}"
                )

    def _url(self) -> str:
        # A base URL that already ends in /v1 (as gateways are often given) is not doubled.
        base = self._base_url.removesuffix("/v1")
        return f"{base}/v1/messages"

    def _headers(self, key: str | None) -> Mapping[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if key:
            headers["x-api-key"] = key
        return headers

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        paused: tuple[dict[str, Any], ...] = ()
        if isinstance(request, _Continued):
            paused = request.paused
        body = build_anthropic_body(
            self._model, request, max_tokens=self._max_tokens, cache=self._cache
        )
        if paused:  # the paused turn's content, as the API sent it: the model goes on
            body["messages"].append({"role": "assistant", "content": list(paused)})
        return body

    def _parser(self, key: str | None) -> StreamParser:
        return _AnthropicParser(secret=key, provider=self._label)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Continued(ModelRequest):
    """A request with the content of the paused responses it continues (this call only)."""

    paused: tuple[dict[str, Any], ...] = ()


def _joined(pieces: Sequence[ModelResponse]) -> ModelResponse:
    """One response from a paused turn's pieces, in order: their texts, their content (the
    first call carries the paused pieces' blocks), their usage summed."""
    last = pieces[-1]
    if len(pieces) == 1:
        return last
    before = tuple(p for piece in pieces[:-1] for p in piece.parts)
    calls = last.tool_calls
    if calls:
        first = calls[0]
        calls = (replace(first, parts=before + first.parts), *calls[1:])
    usage = sum((p.usage for p in pieces), Usage())
    return replace(
        last,
        text="".join(p.text for p in pieces),
        tool_calls=calls,
        usage=usage,
        parts=before + last.parts,
    )


def build_anthropic_body(
    model: str,
    request: ModelRequest,
    *,
    max_tokens: int,
    cache: PromptCache | None = None,
) -> dict[str, Any]:
    """The JSON body of a streaming Messages request, with ``cache``'s breakpoints (none when
    None). The conversation goes last, so what the steps of a turn share is a prefix of the
    body's bytes, as it is of the prompt (tools, system, messages)."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True}
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    if request.instructions:
        body["system"] = request.instructions
    body["messages"] = _messages(request.messages)
    if cache is not None:
        mark_anthropic_body(body, cache)
    return body


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as content blocks. Same-role neighbours merge into one message, so the tool
    results of one assistant message travel in one user message, as the API requires."""
    out: list[dict[str, Any]] = []
    ids = CallIds(lambda recorded: _ID_CHARS.sub("_", recorded))

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return  # the API refuses empty content
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        if message.role == "user":
            add("user", [{"type": "text", "text": message.text}] if message.text else [])
        elif message.role == "assistant":
            kept = assistant_blocks(
                message.tool_calls,
                lambda call: {
                    "type": "tool_use",
                    "id": ids.for_call(call.provider_id),
                    "name": call.name,
                    "input": _input(call.arguments),
                },
            )
            if kept is not None:  # the provider's own blocks, thinking and all
                add("assistant", kept)
                continue
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            for call in message.tool_calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": ids.for_call(call.provider_id),
                        "name": call.name,
                        "input": _input(call.arguments),
                    }
                )
            add("assistant", blocks)
        else:
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": ids.for_result(message.tool_call_id),
            }
            if message.text:
                result["content"] = message.text
            add("user", [result])
    return out


def _input(arguments: str) -> dict[str, Any]:
    """Recorded arguments as the object ``tool_use.input`` must be. Arguments that were not a
    JSON object (the model's own mistake, already answered with a tool error) are shown back
    to the model as they were, under ``_raw_arguments``."""
    try:
        value = decode_arguments(arguments)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    return {"_raw_arguments": arguments}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


class _AnthropicParser:
    def __init__(self, *, secret: str | None, provider: str) -> None:
        self._secret = secret
        self._provider = provider  # how messages name the endpoint
        self._text: list[str] = []
        self._blocks: dict[int, Block] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._stop_inferred = False
        self._stopped = False  # message_stop seen

    @property
    def finished(self) -> bool:
        return self._stop_reason is not None

    @property
    def complete(self) -> bool:
        return self._stopped

    def is_last(self, event: SSEEvent) -> bool:
        try:
            payload = json.loads(event.data)
        except ValueError:
            return False
        return isinstance(payload, dict) and payload.get("type") == "message_stop"

    def end_of_stream(self) -> None:
        # The Messages API always ends with message_delta and message_stop: a close before
        # both is a cut, however clean, not an answer.
        raise ModelRetryableError(
            f"{self._provider} closed the stream before the response finished"
        )

    def _infer_stop(self) -> None:
        self._stop_reason = infer_stop(
            self._provider,
            "".join(self._text),
            [(block.name, self._input_text(block)) for block in self._tool_blocks()],
            tool_stop="tool_use",
            text_stop="end_turn",
        )
        self._stop_inferred = True

    def feed(self, event: SSEEvent) -> str:
        payload = self._decode(event)
        if payload is None:
            return ""
        kind = as_str(payload.get("type")) or event.event
        if kind == "error":
            raise stream_error(self._provider, payload, secret=self._secret)
        if kind == "message_start":
            self._take_usage(as_dict(as_dict(payload.get("message")).get("usage")))
        elif kind == "content_block_start":
            return self._start_block(payload)
        elif kind == "content_block_delta":
            return self._delta(payload)
        elif kind == "message_delta":
            self._message_delta(payload)
        elif kind == "message_stop":
            self._stopped = True
            if self._stop_reason is None:  # a gateway that dropped the message_delta
                self._infer_stop()
        elif kind == "message":
            return self._whole_message(payload)
        # ping, content_block_stop and event types added later need nothing
        return ""

    def feed_after_finish(self, event: SSEEvent) -> None:
        try:
            payload = self._decode(event)
        except ModelError:
            self._stopped = True
            return
        if payload is None:
            return
        kind = as_str(payload.get("type")) or event.event
        if kind == "error":
            raise stream_error(self._provider, payload, secret=self._secret)
        if kind == "message_delta":
            self._message_delta(payload)
        elif kind == "message_stop":
            self._stopped = True

    def response(self) -> ModelResponse:
        calls = finish_calls(
            (block.id, block.name, self._input_text(block)) for block in self._tool_blocks()
        )
        usage = Usage(
            input_tokens=sum(self._usage.get(name, 0) for name in _INPUT_FIELDS),
            output_tokens=self._usage.get("output_tokens", 0),
            cache_read_tokens=self._usage.get("cache_read_input_tokens", 0),
            cache_creation_tokens=self._usage.get("cache_creation_input_tokens", 0),
        )
        parts = tuple(block_part(block) for _, block in sorted(self._blocks.items()))
        return ModelResponse(
            text="".join(self._text),
            tool_calls=attach_parts(calls, parts),
            usage=usage,
            stop_reason=self._stop_reason,
            stop_inferred=self._stop_inferred,
            parts=parts,
        )

    def _tool_blocks(self) -> list[Block]:
        return [block for _, block in sorted(self._blocks.items()) if block.kind == "tool_use"]

    @staticmethod
    def _input_text(block: Block) -> str:
        return "".join(block.parts) or block.start_input

    def _decode(self, event: SSEEvent) -> dict[str, Any] | None:
        data = event.data.strip()
        if not data:
            return None
        try:
            payload = json.loads(data)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            shown = redact(data[:200], self._secret)
            raise ModelError(f"{self._provider} sent a malformed stream event: {shown!r}")
        return payload

    def _take_usage(self, usage: dict[str, Any]) -> None:
        # Counts are cumulative: a later event's count replaces an earlier one.
        for name in (*_INPUT_FIELDS, "output_tokens"):
            value = as_int(usage.get(name))
            if value is not None:
                self._usage[name] = value

    def _start_block(self, payload: dict[str, Any]) -> str:
        index = as_int(payload.get("index")) or 0
        content = as_dict(payload.get("content_block"))
        kind = as_str(content.get("type")) or "unknown"
        block = self._blocks[index] = Block(kind=kind, start=dict(content))
        if kind == "tool_use":
            block.id = as_str(content.get("id")) or None
            block.name = as_str(content.get("name")) or ""
            # Not text the model streamed (a whole message): compact, as the API shows it.
            block.start_input = start_input(content)
            return ""
        if kind == "text":
            return self._add_text(as_str(content.get("text")) or "")
        return ""

    def _delta(self, payload: dict[str, Any]) -> str:
        index = as_int(payload.get("index")) or 0
        delta = as_dict(payload.get("delta"))
        kind = as_str(delta.get("type"))
        block = self._blocks.get(index)
        if kind == "text_delta":
            text = as_str(delta.get("text")) or ""
            if block is None:
                block = self._blocks[index] = Block(kind="text", start={"type": "text"})
            block.text.append(text)
            return self._add_text(text)
        if kind == "input_json_delta":
            if block is None:  # a delta without its start: keep the input, name unknown
                block = self._blocks[index] = Block(kind="tool_use", start={"type": "tool_use"})
            block.parts.append(as_str(delta.get("partial_json")) or "")
        elif block is None:
            return ""
        # Never part of the answer text: kept on the block, given back as it came.
        elif kind == "thinking_delta":
            block.thinking.append(as_str(delta.get("thinking")) or "")
        elif kind == "signature_delta":
            block.signature = as_str(delta.get("signature")) or ""  # sent once, whole
        elif kind == "citations_delta" and "citation" in delta:
            block.citations.append(delta["citation"])
        return ""

    def _message_delta(self, payload: dict[str, Any]) -> None:
        stop_reason = as_str(as_dict(payload.get("delta")).get("stop_reason"))
        if stop_reason:
            self._stop_reason = stop_reason
        self._take_usage(as_dict(payload.get("usage")))

    def _whole_message(self, message: dict[str, Any]) -> str:
        """A server that ignored ``"stream": true`` sent the whole message as JSON."""
        added: list[str] = []
        for index, content in enumerate(message.get("content") or ()):
            added.append(self._start_block({"index": index, "content_block": content}))
        self._take_usage(as_dict(message.get("usage")))
        self._stop_reason = as_str(message.get("stop_reason")) or None
        if self._stop_reason is None:
            self._infer_stop()
        self._stopped = True
        return "".join(added)

    def _add_text(self, text: str) -> str:
        if text:
            self._text.append(text)
        return text
