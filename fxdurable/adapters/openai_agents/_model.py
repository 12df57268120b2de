"""An OpenAI Agents SDK ``Model`` behind fxdurable's model boundary (``runtime.models.base``).

Each model step of fxdurable's turn driver sends the conversation the journal holds (rebuilt by
:mod:`fxdurable.runtime.history` on every request, after a crash too) as Responses-format input
items through the SDK's own ``Model`` interface (``stream_response``, or ``get_response`` when
``stream=False``), with the agent's instructions, model settings and ``FunctionTool`` objects,
and hands back text deltas and one finish: the driver records the response at the finish, with
the tool calls it asked for, exactly as for a provider model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import openai
import pydantic
from agents import FunctionTool, ModelSettings
from agents.items import TResponseInputItem
from agents.models.interface import Model as AgentsModel
from agents.models.interface import ModelTracing
from openai.types import responses
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
)

from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.errors import ContextLengthError, ModelError, ModelRetryableError
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextDelta,
)

__all__ = ["FrameworkModel", "to_input_items", "to_response", "warm_response_types"]

# The Responses types a model step builds (a response, its output items, the stream's events):
# openai defers building their pydantic validators to their first use, ~0.3 s of CPU on the
# event loop in the first model step of a process (2026-12-03: a lost lease, exit 75, under a
# 2 s TTL on a loaded machine). Built when an agent is, before any lease is held.
_RESPONSE_TYPES = (
    "Response",
    "ResponseUsage",
    "ResponseOutputMessage",
    "ResponseOutputText",
    "ResponseOutputRefusal",
    "ResponseFunctionToolCall",
    "ResponseCreatedEvent",
    "ResponseInProgressEvent",
    "ResponseCompletedEvent",
    "ResponseOutputItemAddedEvent",
    "ResponseOutputItemDoneEvent",
    "ResponseContentPartAddedEvent",
    "ResponseContentPartDoneEvent",
    "ResponseTextDeltaEvent",
    "ResponseTextDoneEvent",
    "ResponseFunctionCallArgumentsDeltaEvent",
    "ResponseFunctionCallArgumentsDoneEvent",
)


def warm_response_types() -> list[type[pydantic.BaseModel]]:
    """Build the validators of the Responses types a model step uses now (once per process;
    later calls cost nothing); returns the types."""
    found: list[type[pydantic.BaseModel]] = [getattr(responses, n) for n in _RESPONSE_TYPES]
    for cls in found:
        if not cls.__pydantic_complete__:
            cls.model_rebuild()
    return found


class FrameworkModel:
    """fxdurable's :class:`~fxdurable.runtime.models.base.Model` over an Agents SDK ``Model``.

    ``tools`` are the agent's ``FunctionTool`` objects by name: a request hands the SDK model
    each tool as the SDK defined it (its schema, ``strict_json_schema``), not a copy. Tracing is
    off for these calls (fxdurable's own spans cover them), and no ``previous_response_id`` or
    conversation id is sent: the journal, not the provider, holds the conversation."""

    def __init__(
        self,
        model: AgentsModel,
        tools: Mapping[str, FunctionTool],
        *,
        settings: ModelSettings,
        stream: bool = True,
        label: str = "",
    ) -> None:
        self._model = model
        self._tools = dict(tools)
        self._settings = settings
        self._streamed = stream
        self._label = label or type(model).__name__
        warm_response_types()  # not in the first step, on the loop, under a lease

    @property
    def name(self) -> str:
        return f"openai-agents:{self._label}"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        try:
            async for part in self._request(request):
                yield part
        except (
            openai.APIConnectionError,
            openai.RateLimitError,
            openai.InternalServerError,
        ) as exc:
            # Transient (a timeout, 429, 5xx): fxdurable's model retries with backoff, durably.
            raise ModelRetryableError(
                f"{self.name}: {exc}", retry_after_s=_retry_after(exc)
            ) from exc
        except openai.BadRequestError as exc:
            if exc.code == "context_length_exceeded":
                raise ContextLengthError(f"{self.name}: {exc}") from exc
            raise ModelError(f"{self.name}: {exc}") from exc

    async def _request(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        args: dict[str, Any] = {
            "system_instructions": request.instructions or None,
            "input": to_input_items(request.messages),
            "model_settings": self._settings,
            "tools": [self._tools[spec.name] for spec in request.tools if spec.name in self._tools],
            "output_schema": None,
            "handoffs": [],
            "tracing": ModelTracing.DISABLED,
            "previous_response_id": None,
            "conversation_id": None,
            "prompt": None,
        }
        if not self._streamed:
            response = await self._model.get_response(**args)
            yield Finish(to_response(response.output, response.usage))
            return
        async for event in self._model.stream_response(**args):
            if event.type == "response.output_text.delta":
                if event.delta:
                    yield TextDelta(event.delta)
            elif event.type == "response.completed":
                # The finish comes with the whole response (its calls' arguments complete):
                # the driver records it here, before any call runs.
                yield Finish(_finished(event.response))
                return
            elif event.type in ("response.failed", "response.incomplete"):
                if event.type == "response.incomplete" and _cut_by_length(event.response):
                    yield Finish(_finished(event.response))
                    return
                raise ModelError(f"{self.name}: the model's stream ended with {event.type}")
        # A stream that ends without response.completed: fxdurable's model step retries it.


def to_input_items(messages: Iterable[ChatMessage]) -> list[TResponseInputItem]:
    """The journal's conversation as Responses-format input items: user and assistant text
    as messages, each tool call as a ``function_call`` (its call id as the model sent it) and
    each result as its ``function_call_output``."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": message.text,
                }
            )
            continue
        if message.text or not message.tool_calls:
            items.append({"role": message.role, "content": message.text})
        for call in message.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.provider_id or "",
                    "name": call.name,
                    "arguments": call.arguments,
                }
            )
    out: list[TResponseInputItem] = items  # type: ignore[assignment]  # TypedDict unions
    return out


def to_response(output: Iterable[Any], usage: Any, stop_reason: str | None = None) -> ModelResponse:
    """The SDK model's output items as fxdurable records them: the assistant messages' text
    (refusals included), the function calls with their arguments as sent and their call ids,
    the usage. Reasoning items are not kept (the conversation is rebuilt without them)."""
    text: list[str] = []
    calls: list[ToolCallRequest] = []
    for item in output:
        if isinstance(item, ResponseOutputMessage):
            for part in item.content:
                if isinstance(part, ResponseOutputText):
                    text.append(part.text)
                elif isinstance(part, ResponseOutputRefusal):
                    text.append(part.refusal)
        elif isinstance(item, ResponseFunctionToolCall):
            calls.append(
                ToolCallRequest(
                    name=item.name, arguments=item.arguments, provider_id=item.call_id or None
                )
            )
    tokens = Usage(
        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
    )
    return ModelResponse(
        text="".join(text),
        tool_calls=tuple(calls),
        usage=tokens,
        stop_reason=stop_reason,
        stop_inferred=stop_reason is None,
    )


def _retry_after(exc: openai.APIError) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _cut_by_length(response: Response) -> bool:
    details = response.incomplete_details
    return details is not None and details.reason == "max_output_tokens"


def _finished(response: Response) -> ModelResponse:
    # "length": the provider-neutral name fxdurable reads as cut by the output limit.
    return to_response(
        response.output, response.usage, "length" if _cut_by_length(response) else None
    )
