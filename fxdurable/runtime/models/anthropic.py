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
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from fxdurable.core.records import MessageContent, Usage
from fxdurable.errors import ModelError, ModelRetryableError
from fxdurable.runtime.models.anthropic_parts import (
    WIRE,
    Block,
    assistant_blocks,
    attach_parts,
    block_part,
    plain_text,
    start_input,
)
from fxdurable.runtime.models.attachment_parts import anthropic_blocks
from fxdurable.runtime.models.base import (
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    opens_turn,
    schema_instructions,
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
    conversation_field = "messages"
    owned_fields = frozenset({"model", "stream", "tools", "system", "container", "output_config"})

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        timeout: Timeouts | float | None = None,
        finish_grace_s: float = 1.0,
        transport: httpx.AsyncBaseTransport | None = None,
        prompt_cache: PromptCache | bool | None = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            finish_grace_s=finish_grace_s,
            transport=transport,
            extra_body=extra_body,
        )
        self._max_tokens = max_tokens
        self._cache = PromptCache.resolve(prompt_cache)

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
        return build_anthropic_body(
            self._model, request, max_tokens=self._max_tokens, cache=self._cache
        )

    def _parser(self, key: str | None) -> StreamParser:
        return _AnthropicParser(secret=key, provider=self._label)


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
    instructions = request.instructions
    if request.output is not None:
        # Structured outputs take closed schemas without numeric or string constraints.
        if request.output.strict and not _constrained(request.output.schema):
            body["output_config"] = {
                "format": {"type": "json_schema", "schema": request.output.schema}
            }
        else:  # validated after the answer either way (runtime/output.py)
            instructions = f"{instructions}\n\n{schema_instructions(request.output)}".lstrip()
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    if instructions:
        body["system"] = instructions
    container = _container(request.messages)
    if container is not None:
        body["container"] = container
    body["messages"] = _messages(request.messages)
    if cache is not None:
        mark_anthropic_body(body, cache)
    return body


# JSON-schema keywords Anthropic's structured outputs refuse (its SDKs strip them and check
# the answer themselves; here the answer is checked either way, runtime/output.py).
_UNSUPPORTED_KEYWORDS = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "maxItems",
    }
)


def _constrained(schema: Any) -> bool:
    """Whether ``schema`` uses a keyword Anthropic's structured outputs refuse anywhere (a
    property so named counts too: the schema is then described, which is harmless)."""
    if isinstance(schema, dict):
        return bool(_UNSUPPORTED_KEYWORDS & set(schema)) or any(
            _constrained(v) for v in schema.values()
        )
    if isinstance(schema, list):
        return any(_constrained(v) for v in schema)
    return False


def _container(messages: Sequence[ChatMessage]) -> str | None:
    """The code-execution container of the current turn's latest response that ran in one:
    a continuation of a paused turn (and the turn's later requests) must name it again."""
    for message in reversed(messages):
        if opens_turn(message):
            return None
        if message.content is not None and message.content.container:
            return message.content.container
    return None


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
            text = [{"type": "text", "text": message.text}] if message.text else []
            add("user", text + anthropic_blocks(message.attachments))
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
            if kept is None and message.content is not None and message.content.wire == WIRE:
                kept = [
                    dict(part)
                    for part in message.content.parts
                    if part.get("type") != "text" or part.get("text")  # no empty text blocks
                ]
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
            if message.attachments:  # a list of text, image and document blocks
                text = [{"type": "text", "text": message.text}] if message.text else []
                result["content"] = text + anthropic_blocks(message.attachments)
            elif message.text:
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
        self._container: str | None = None  # the code-execution container, when one ran

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
            message = as_dict(payload.get("message"))
            self._take_usage(as_dict(message.get("usage")))
            self._take_container(message)
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
        content = None
        if not calls and (self._container is not None or not plain_text(parts)):
            content = MessageContent(wire=WIRE, parts=parts, container=self._container)
        return ModelResponse(
            text="".join(self._text),
            tool_calls=attach_parts(calls, parts),
            usage=usage,
            stop_reason=self._stop_reason,
            stop_inferred=self._stop_inferred,
            parts=parts,
            content=content,
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
        delta = as_dict(payload.get("delta"))
        stop_reason = as_str(delta.get("stop_reason"))
        if stop_reason:
            self._stop_reason = stop_reason
        self._take_usage(as_dict(payload.get("usage")))
        self._take_container(delta)

    def _take_container(self, holder: dict[str, Any]) -> None:
        # The response names its container as an object ({"id", "expires_at"}); a request
        # names it by its id.
        container = holder.get("container")
        found = as_str(as_dict(container).get("id")) if isinstance(container, dict) else None
        if found:
            self._container = found

    def _whole_message(self, message: dict[str, Any]) -> str:
        """A server that ignored ``"stream": true`` sent the whole message as JSON."""
        added: list[str] = []
        for index, content in enumerate(message.get("content") or ()):
            added.append(self._start_block({"index": index, "content_block": content}))
        self._take_usage(as_dict(message.get("usage")))
        self._take_container(message)
        self._stop_reason = as_str(message.get("stop_reason")) or None
        if self._stop_reason is None:
            self._infer_stop()
        self._stopped = True
        return "".join(added)

    def _add_text(self, text: str) -> str:
        if text:
            self._text.append(text)
        return text
