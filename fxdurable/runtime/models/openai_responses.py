"""The OpenAI Responses API (``POST {base}/responses``), streaming: ``openai-responses/MODEL``.

The API OpenAI recommends for tool-using reasoning models. Requests are stateless
(``store: false``): every request sends the whole conversation as ``input`` items, and asks
for ``include: ["reasoning.encrypted_content"]`` so the model's reasoning comes back
encrypted with each response and can be sent back with the calls it led to (the journal
keeps it; a recovered turn sends the same bytes). Nothing is kept at OpenAI between requests,
so ``previous_response_id`` is never used: a turn recovered after a crash, on another worker,
does not depend on a response stored at the provider.

Configuration is the chat provider's (:class:`OpenAIModel`): ``$FXD_OPENAI_BASE_URL`` then
``$OPENAI_BASE_URL`` then ``https://api.openai.com/v1``; ``$OPENAI_API_KEY`` read at each
call; ``$OPENAI_ORG_ID`` / ``$OPENAI_PROJECT_ID`` as the ``OpenAI-Organization`` /
``OpenAI-Project`` headers. Errors go through the same table (``errors.py``).
"""

from __future__ import annotations

from typing import Any

from fxdurable.runtime.models.base import ModelRequest, ToolSpec
from fxdurable.runtime.models.caching import session_cache_key
from fxdurable.runtime.models.httpmodel import StreamParser
from fxdurable.runtime.models.openai import OpenAIModel
from fxdurable.runtime.models.openai_responses_items import input_items
from fxdurable.runtime.models.openai_responses_stream import ResponsesParser

__all__ = ["OpenAIResponsesModel", "build_responses_body"]


class OpenAIResponsesModel(OpenAIModel):
    """A Responses API model; configured exactly as :class:`OpenAIModel` (same environment,
    headers and constructor). ``max_tokens`` is sent as ``max_output_tokens``; a response
    cut by it ends in ``response.incomplete`` and is recorded as truncated."""

    prefix = "openai-responses"
    conversation_field = "input"
    owned_fields = frozenset(
        {"model", "stream", "store", "include", "tools", "instructions", "text", "prompt_cache_key"}
    )

    def _url(self) -> str:
        return f"{self._base_url}/responses"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return build_responses_body(
            self._model,
            request,
            max_output_tokens=self._max_tokens,
            cache_key=session_cache_key(request.session_id, self._cache),
        )

    def _parser(self, key: str | None) -> StreamParser:
        return ResponsesParser(secret=key, provider=self._label)


def build_responses_body(
    model: str,
    request: ModelRequest,
    *,
    max_output_tokens: int | None = None,
    cache_key: str | None = None,
) -> dict[str, Any]:
    """The JSON body of a streaming, stateless Responses API request; ``cache_key`` is sent
    as ``prompt_cache_key``. The conversation (``input``) goes last (docs/caching.md)."""
    body: dict[str, Any] = {
        "model": model,
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    if request.output is not None:  # a typed final answer (runtime/output.py)
        output = request.output
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": output.name,
                "schema": output.schema,
                "strict": output.strict,
            }
        }
    if max_output_tokens is not None:
        body["max_output_tokens"] = max_output_tokens
    if cache_key is not None:
        body["prompt_cache_key"] = cache_key
    if request.tools:
        body["tools"] = [_tool(spec) for spec in request.tools]
    if request.instructions:
        body["instructions"] = request.instructions
    body["input"] = input_items(request.messages)
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    # The Responses API's function tools are flat (no nested "function" object); strict
    # mode stays off: it would reject schemas that are not closed and all-required.
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "strict": False,
    }
