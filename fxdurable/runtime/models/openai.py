"""OpenAI-compatible Chat Completions, streaming: OpenAI, vLLM, Ollama, LiteLLM, gateways.

What the parser survives: tool-call argument fragments accumulated per ``index`` (parallel
calls interleave; the id and name may come only in the first fragment, and ids may repeat or
be missing), pretty-printed arguments (kept as sent), ``usage`` in a chunk after the finish
with empty ``choices``, streams that stay open after the finish or end without ``[DONE]``,
streams that never set ``finish_reason`` (inferred, and recorded as inferred), and ``error``
payloads after a 200, before or after the finish (a failed call, never an empty success).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from fxdurable.core.records import Usage
from fxdurable.errors import ModelError
from fxdurable.runtime.models.attachment_parts import chat_parts, chat_tool_followup
from fxdurable.runtime.models.base import ChatMessage, ModelRequest, ModelResponse, ToolSpec
from fxdurable.runtime.models.caching import PromptCache, session_cache_key
from fxdurable.runtime.models.endpoint import env_value
from fxdurable.runtime.models.errors import redact, stream_error
from fxdurable.runtime.models.http import Timeouts
from fxdurable.runtime.models.httpmodel import HttpModel, StreamParser
from fxdurable.runtime.models.openai_parts import (
    Extras,
    attach_fields,
    call_fields,
    given_back,
    message_fields,
)
from fxdurable.runtime.models.sse import SSEEvent
from fxdurable.runtime.models.wire import (
    CallIds,
    as_dict,
    as_int,
    as_str,
    finish_calls,
    infer_stop,
    short_id,
)

__all__ = ["OpenAIModel", "build_openai_body"]

_ID_LIMIT = 40  # OpenAI rejects longer tool-call ids


class OpenAIModel(HttpModel):
    """A Chat Completions model, configured as the official SDK reads the environment.

    ``base_url`` defaults to ``$FXD_OPENAI_BASE_URL``, then ``$OPENAI_BASE_URL``, then
    ``https://api.openai.com/v1`` (empty values count as unset). The key defaults to
    ``$OPENAI_API_KEY``, read at each call (without one, no ``Authorization`` header is sent,
    as local servers expect). ``organization`` and ``project`` default to ``$OPENAI_ORG_ID``
    and ``$OPENAI_PROJECT_ID``, read once here as the SDK does, and are sent as the
    ``OpenAI-Organization`` and ``OpenAI-Project`` headers when set."""

    prefix = "openai"
    provider = "OpenAI"
    key_env = "OPENAI_API_KEY"
    base_url_envs = ("FXD_OPENAI_BASE_URL", "OPENAI_BASE_URL")
    default_base_url = "https://api.openai.com/v1"
    conversation_field = "messages"
    owned_fields = frozenset(
        {"model", "stream", "stream_options", "tools", "response_format", "prompt_cache_key"}
    )
    organization_env = "OPENAI_ORG_ID"
    project_env = "OPENAI_PROJECT_ID"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: Timeouts | float | None = None,
        finish_grace_s: float = 1.0,
        max_tokens: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        organization: str | None = None,
        project: str | None = None,
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
        self._organization = _given_or_env(organization, self.organization_env)
        self._project = _given_or_env(project, self.project_env)
        self._cache = PromptCache.resolve(prompt_cache)

    def settings_described(self) -> list[str]:
        said = super().settings_described()
        for header, value, env, given in (
            ("OpenAI-Organization", self._organization, self.organization_env, "organization="),
            ("OpenAI-Project", self._project, self.project_env, "project="),
        ):
            if value is not None:
                source = given if value.source_given else env
                said.append(f"{header} from {source}")
        return said

    def _url(self) -> str:
        return f"{self._base_url}/chat/completions"

    def _headers(self, key: str | None) -> Mapping[str, str]:
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        if self._organization is not None:
            headers["openai-organization"] = self._organization.value
        if self._project is not None:
            headers["openai-project"] = self._project.value
        return headers

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return build_openai_body(
            self._model,
            request,
            max_tokens=self._max_tokens,
            cache_key=session_cache_key(request.session_id, self._cache),
        )

    def _parser(self, key: str | None) -> StreamParser:
        return _OpenAIParser(secret=key, provider=self._label)


@dataclass(frozen=True, slots=True)
class _Setting:
    value: str
    source_given: bool  # passed to the constructor, not read from the environment


def _given_or_env(given: str | None, env: str) -> _Setting | None:
    if given is not None:
        return _Setting(given, True) if given.strip() else None
    value = env_value(env)
    return _Setting(value, False) if value is not None else None


def build_openai_body(
    model: str,
    request: ModelRequest,
    *,
    max_tokens: int | None = None,
    cache_key: str | None = None,
) -> dict[str, Any]:
    """The JSON body of a streaming Chat Completions request; ``cache_key`` is sent as
    ``prompt_cache_key``. The conversation goes last (docs/caching.md)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.output is not None:  # a typed final answer (runtime/output.py)
        output = request.output
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": output.name, "schema": output.schema, "strict": output.strict},
        }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    body["messages"] = _messages(request.instructions, request.messages)
    return body


def _messages(instructions: str, messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    ids = CallIds(lambda recorded: short_id(recorded, _ID_LIMIT))
    round_results: list[tuple[str, ChatMessage]] = []
    for message in messages:
        if message.role != "tool":
            _flush_tool_images(out, round_results)
        if message.role == "user":
            content: str | list[dict[str, Any]] = message.text
            if message.attachments:
                content = chat_parts(message.text, message.attachments)
            out.append({"role": "user", "content": content})
        elif message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant"}
            # With tool calls and no text, content is null (an empty string is refused by
            # some servers' templates).
            entry["content"] = message.text if message.text or not message.tool_calls else None
            kept, per_call = given_back(message.tool_calls)
            entry.update(kept)  # reasoning_content, reasoning_details, ... as they came
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        **own,
                        "id": ids.for_call(call.provider_id),
                        "type": "function",
                        "function": {
                            **own.get("function", {}),
                            "name": call.name,
                            "arguments": call.arguments,
                        },
                    }
                    for call, own in zip(message.tool_calls, per_call, strict=True)
                ]
            out.append(entry)
        else:
            call_id = ids.for_result(message.tool_call_id)
            out.append({"role": "tool", "tool_call_id": call_id, "content": message.text})
            round_results.append((call_id, message))
    _flush_tool_images(out, round_results)
    return out


def _flush_tool_images(
    out: list[dict[str, Any]], round_results: list[tuple[str, ChatMessage]]
) -> None:
    """After a round's tool messages (which take text only on Chat Completions), the user
    message with the images and documents those results returned."""
    followup = chat_tool_followup(round_results)
    if followup is not None:
        out.append(followup)
    round_results.clear()


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


@dataclass(slots=True)
class _Call:
    id: str | None = None
    name: str = ""
    parts: list[str] = field(default_factory=list)
    extras: tuple[Extras, Extras] = field(default_factory=call_fields)


class _OpenAIParser:
    def __init__(self, *, secret: str | None, provider: str) -> None:
        self._secret = secret
        self._provider = provider  # how messages name the endpoint
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._extras = message_fields()  # reasoning and other fields beyond the answer
        self._last_index: int | None = None
        self._usage: Usage | None = None
        # Usage sent before the finish may be partial (prompt tokens only, say): only usage
        # at or after the finish ends the wait for it.
        self._final_usage = False
        self._stop_reason: str | None = None
        self._stop_inferred = False
        self._done = False  # [DONE], or nothing more is worth waiting for

    @property
    def finished(self) -> bool:
        return self._stop_reason is not None

    @property
    def complete(self) -> bool:
        return self.finished and (self._done or self._final_usage)

    def is_last(self, event: SSEEvent) -> bool:
        return event.data.strip() == "[DONE]"

    def feed(self, event: SSEEvent) -> str:
        if event.event == "error":
            raise stream_error(self._provider, event.data, secret=self._secret)
        data = event.data.strip()
        if not data:
            return ""
        if data == "[DONE]":
            # Some servers (gateways, local runtimes) never set finish_reason: [DONE] after
            # whole content is the end of a complete response.
            self.end_of_stream()
            self._done = True
            return ""
        payload = self._decode(data)
        if payload.get("error"):
            raise stream_error(self._provider, payload, secret=self._secret)
        has_usage = self._take_usage(payload)
        added: list[str] = []
        for choice in payload.get("choices") or ():
            choice = as_dict(choice)
            if choice.get("index", 0) != 0:
                continue  # only the first choice is ours (n=1)
            # "message": a server that ignored "stream": true sent the whole completion
            delta = as_dict(choice.get("delta") or choice.get("message"))
            self._extras.take(delta)
            for key in ("content", "refusal"):
                text = as_str(delta.get(key))
                if text:
                    added.append(text)
            for fragment in delta.get("tool_calls") or ():
                self._take_fragment(as_dict(fragment))
            finish_reason = choice.get("finish_reason")
            if finish_reason == "error":  # OpenRouter: the generation failed mid-way
                raise stream_error(self._provider, choice, secret=self._secret)
            if finish_reason:
                self._stop_reason = str(finish_reason)
                self._final_usage = has_usage
        text = "".join(added)
        self._text.append(text)
        return text

    def feed_after_finish(self, event: SSEEvent) -> None:
        if event.event == "error":
            raise stream_error(self._provider, event.data, secret=self._secret)
        data = event.data.strip()
        if data == "[DONE]":
            self._done = True
            return
        if not data:
            return
        try:
            payload = as_dict(json.loads(data))
        except ValueError:
            self._done = True
            return
        if payload.get("error"):
            raise stream_error(self._provider, payload, secret=self._secret)
        if self._take_usage(payload):
            self._final_usage = True

    def end_of_stream(self) -> None:
        calls = [(call.name, "".join(call.parts)) for _, call in sorted(self._calls.items())]
        self._stop_reason = infer_stop(
            self._provider,
            "".join(self._text),
            calls,
            tool_stop="tool_calls",
            text_stop="stop",
        )
        self._stop_inferred = True

    def response(self) -> ModelResponse:
        ordered = [call for _, call in sorted(self._calls.items())]
        calls = finish_calls((call.id, call.name, "".join(call.parts)) for call in ordered)
        per_call = [
            (own.merged(), function.merged()) for own, function in (c.extras for c in ordered)
        ]
        return ModelResponse(
            text="".join(self._text),
            tool_calls=attach_fields(calls, self._extras.merged(), per_call),
            usage=self._usage or Usage(),
            stop_reason=self._stop_reason,
            stop_inferred=self._stop_inferred,
        )

    def _decode(self, data: str) -> dict[str, Any]:
        try:
            payload = json.loads(data)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            shown = redact(data[:200], self._secret)
            raise ModelError(f"{self._provider} sent a malformed stream event: {shown!r}")
        return payload

    def _take_usage(self, payload: dict[str, Any]) -> bool:
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            return False
        prompt = as_dict(usage.get("prompt_tokens_details"))
        completion = as_dict(usage.get("completion_tokens_details"))
        self._usage = Usage(
            input_tokens=as_int(usage.get("prompt_tokens")) or 0,
            output_tokens=as_int(usage.get("completion_tokens")) or 0,
            cache_read_tokens=as_int(prompt.get("cached_tokens")) or 0,
            reasoning_tokens=as_int(completion.get("reasoning_tokens")) or 0,
        )
        return True

    def _take_fragment(self, fragment: dict[str, Any]) -> None:
        call_id = as_str(fragment.get("id")) or None
        index = as_int(fragment.get("index"))
        if index is None:
            # Some servers omit the index: a new id starts a new call, else the last goes on.
            last = self._calls.get(self._last_index) if self._last_index is not None else None
            if last is None or (call_id is not None and call_id != last.id):
                index = max(self._calls, default=-1) + 1
            else:
                index = self._last_index
        assert index is not None
        call = self._calls.setdefault(index, _Call())
        self._last_index = index
        if call_id and call.id is None:
            call.id = call_id
        function = as_dict(fragment.get("function"))
        call.extras[0].take(fragment)
        call.extras[1].take(function)
        name = as_str(function.get("name"))
        if name and not call.name:
            call.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.parts.append(arguments)
        elif isinstance(arguments, dict):  # a server that sends the object, not its text
            call.parts.append(json.dumps(arguments))
