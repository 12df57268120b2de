"""The OpenAI Responses API's streaming events, read into one :class:`ModelResponse`.

Events are typed by their ``type`` field (the ``event:`` line says the same): answer text from
``response.output_text.delta`` (and ``response.refusal.delta``) only, never from reasoning;
output items from ``response.output_item.added`` / ``.done`` (the ``.done`` item is the one
kept, verbatim); function-call arguments from ``response.function_call_arguments.delta``,
with ``.done``'s ``arguments`` and then the done item's as the authority. The end is
``response.completed``, ``response.incomplete`` (``incomplete_details.reason``, e.g.
``max_output_tokens``: the stop reason, so a cut answer counts as truncated) or
``response.failed`` (its ``response.error``), and an ``error`` event inside the 200 stream is a
failed call. Each carries the whole response, usage included, so nothing is awaited after it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fxdurable.core.records import Usage
from fxdurable.errors import ModelError
from fxdurable.runtime.models.base import ModelResponse
from fxdurable.runtime.models.errors import redact, stream_error
from fxdurable.runtime.models.openai_responses_items import attach_items
from fxdurable.runtime.models.sse import SSEEvent
from fxdurable.runtime.models.wire import as_dict, as_int, as_str, finish_calls, infer_stop

__all__ = ["COMPLETED", "ResponsesParser"]

COMPLETED = "completed"  # the stop reason of a response.completed (the API has no other)
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})


class ResponsesParser:
    def __init__(self, *, secret: str | None, provider: str) -> None:
        self._secret = secret
        self._provider = provider
        self._text: list[str] = []
        self._items: dict[int, dict[str, Any]] = {}  # output_index -> item (done wins)
        self._arguments: dict[int, list[str]] = {}  # output_index -> argument deltas
        self._final_arguments: dict[int, str] = {}  # from function_call_arguments.done
        self._stop_reason: str | None = None
        self._stop_inferred = False
        self.usage = Usage()

    @property
    def finished(self) -> bool:
        return self._stop_reason is not None

    @property
    def complete(self) -> bool:
        # The terminal event carries the usage: nothing after it is worth waiting for.
        return self.finished

    def is_last(self, event: SSEEvent) -> bool:
        # Asked of an event not yet ended by its blank line (its data may be cut short): only
        # whole JSON of a terminal type counts, whatever its ``event:`` line said.
        return _type_of(event.data) in _TERMINAL

    def feed(self, event: SSEEvent) -> str:
        data = event.data.strip()
        if not data:
            return ""
        payload = self._decode(data)
        kind = as_str(payload.get("type")) or event.event
        if kind == "error" or event.event == "error":
            raise self._error(payload)
        if kind in _TEXT_DELTAS:
            text = as_str(payload.get("delta")) or ""
            self._text.append(text)
            return text
        index = as_int(payload.get("output_index"))
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = payload.get("item")
            # the .done item is the whole one; .added only holds the place until then
            fresh = kind.endswith(".done") or index not in self._items
            if index is not None and isinstance(item, dict) and fresh:
                self._items[index] = dict(item)
        elif kind == "response.function_call_arguments.delta" and index is not None:
            self._arguments.setdefault(index, []).append(as_str(payload.get("delta")) or "")
        elif kind == "response.function_call_arguments.done" and index is not None:
            arguments = as_str(payload.get("arguments"))
            if arguments is not None:
                self._final_arguments[index] = arguments
        elif kind in _TERMINAL:
            self._finish(kind, as_dict(payload.get("response")))
        # anything else (response.created, reasoning summary deltas, content_part events,
        # annotations, events added later) adds no answer text
        return ""

    def feed_after_finish(self, event: SSEEvent) -> None:
        data = event.data.strip()
        if not data:
            return
        try:
            payload = as_dict(json.loads(data))
        except ValueError:
            return
        if payload.get("type") == "error" or event.event == "error":
            raise self._error(payload)

    def end_of_stream(self) -> None:
        calls = [(name, arguments) for _, name, arguments, _ in self._calls()]
        # A server that closes the stream without a terminal event (compatible servers do):
        # a whole-looking content is complete, anything else was cut (retryable).
        infer_stop(
            self._provider,
            "".join(self._text),
            calls,
            tool_stop=COMPLETED,
            text_stop=COMPLETED,
        )
        self._stop_reason = COMPLETED
        self._stop_inferred = True

    def response(self) -> ModelResponse:
        found = self._calls()
        calls = finish_calls((call_id, name, arguments) for call_id, name, arguments, _ in found)
        items = [self._items[index] for index in sorted(self._items)]
        return ModelResponse(
            text="".join(self._text),
            tool_calls=attach_items(calls, items),
            usage=self.usage,
            stop_reason=self._stop_reason,
            stop_inferred=self._stop_inferred,
        )

    def _calls(self) -> list[tuple[str | None, str, str, int]]:
        """``(call_id, name, arguments, output_index)`` of the function calls, in order."""
        out = []
        for index in sorted(self._items):
            item = self._items[index]
            if item.get("type") != "function_call":
                continue
            arguments = as_str(item.get("arguments"))
            if not arguments:
                arguments = self._final_arguments.get(index)
            if arguments is None:
                arguments = "".join(self._arguments.get(index, ()))
            name = as_str(item.get("name")) or ""
            out.append((as_str(item.get("call_id")) or None, name, arguments, index))
        return out

    def _finish(self, kind: str, response: Mapping[str, Any]) -> None:
        self._take_usage(as_dict(response.get("usage")))
        if kind == "response.failed":
            error = as_dict(response.get("error"))
            raise self._error(error or {"message": "the response failed (no error given)"})
        # The terminal event's output is the whole response: its items fill in any whose
        # .done event a proxy dropped.
        for index, item in enumerate(response.get("output") or ()):
            if isinstance(item, dict) and index not in self._items:
                self._items[index] = dict(item)
        if kind == "response.incomplete":
            reason = as_str(as_dict(response.get("incomplete_details")).get("reason"))
            self._stop_reason = reason or "incomplete"
        else:
            self._stop_reason = COMPLETED

    def _take_usage(self, usage: Mapping[str, Any]) -> None:
        if not usage:
            return
        self.usage = Usage(
            input_tokens=as_int(usage.get("input_tokens")) or 0,
            output_tokens=as_int(usage.get("output_tokens")) or 0,
            cache_read_tokens=as_int(
                as_dict(usage.get("input_tokens_details")).get("cached_tokens")
            )
            or 0,
            reasoning_tokens=as_int(
                as_dict(usage.get("output_tokens_details")).get("reasoning_tokens")
            )
            or 0,
        )

    def _error(self, payload: Mapping[str, Any]) -> ModelError:
        # An ``error`` event has its code and message at the top level, a failed response
        # under ``response.error``: either goes through the one table as an OpenAI error body.
        inner = as_dict(payload.get("error")) or dict(payload)
        error = {
            key: inner[key] for key in ("message", "code", "param") if inner.get(key) is not None
        }
        if isinstance(inner.get("type"), str) and inner["type"] != "error":
            error["type"] = inner["type"]
        return stream_error(self._provider, {"error": error}, secret=self._secret)

    def _decode(self, data: str) -> dict[str, Any]:
        try:
            payload = json.loads(data)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            shown = redact(data[:200], self._secret)
            raise ModelError(f"{self._provider} sent a malformed stream event: {shown!r}")
        return payload


def _type_of(data: str) -> str | None:
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    return as_str(payload.get("type")) if isinstance(payload, dict) else None
