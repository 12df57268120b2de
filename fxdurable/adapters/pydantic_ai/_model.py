"""A pydantic-ai model behind fxdurable's model boundary (``runtime.models.base.Model``).

Each model step of the turn driver sends the conversation the journal holds (rebuilt by
:mod:`fxdurable.runtime.history` on every request, after a crash too) as pydantic-ai message
parts, through pydantic-ai's public direct API (``pydantic_ai.direct.model_request_stream`` or
``model_request``), and hands back text deltas and one finish: the driver records the
response at the finish, with the tool calls it asked for, exactly as for a provider model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from pydantic_ai import messages as pm
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.models import Model as PydanticAIModel
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextDelta,
)

__all__ = ["FrameworkModel", "to_messages", "to_response"]


class FrameworkModel:
    """fxdurable's :class:`~fxdurable.runtime.models.base.Model` over a pydantic-ai ``Model``.

    ``tool_defs`` are the agent's pydantic-ai tool definitions by name: a request sends each
    tool as pydantic-ai defined it (its schema, ``strict``, ``sequential``), not a copy.
    ``stream=False`` makes one non-streamed request (a model without ``request_stream``)."""

    def __init__(
        self,
        model: PydanticAIModel,
        tool_defs: Mapping[str, ToolDefinition],
        *,
        settings: ModelSettings | None = None,
        stream: bool = True,
    ) -> None:
        self._model = model
        self._tool_defs = dict(tool_defs)
        self._settings = settings
        self._streamed = stream

    @property
    def name(self) -> str:
        return f"pydantic-ai:{self._model.model_name}"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        messages = to_messages(request)
        params = ModelRequestParameters(
            function_tools=[
                self._tool_defs.get(spec.name)
                or ToolDefinition(
                    name=spec.name,
                    description=spec.description,
                    parameters_json_schema=spec.parameters,
                )
                for spec in request.tools
            ],
            allow_text_output=True,
        )
        if not self._streamed:
            response = await model_request(
                self._model,
                messages,
                model_settings=self._settings,
                model_request_parameters=params,
            )
            yield Finish(to_response(response))
            return
        async with model_request_stream(
            self._model, messages, model_settings=self._settings, model_request_parameters=params
        ) as streamed:
            async for event in streamed:
                text = _text_of(event)
                if text:
                    yield TextDelta(text)
            response = streamed.get()
        # The finish comes once pydantic-ai has assembled the whole response (its tool calls'
        # arguments complete): the driver records it here, before any call runs.
        yield Finish(to_response(response))


def _text_of(event: pm.ModelResponseStreamEvent) -> str:
    if isinstance(event, pm.PartStartEvent) and isinstance(event.part, pm.TextPart):
        return event.part.content
    if isinstance(event, pm.PartDeltaEvent) and isinstance(event.delta, pm.TextPartDelta):
        return event.delta.content_delta
    return ""


def to_messages(request: ModelRequest) -> list[pm.ModelMessage]:
    """The journal's conversation as pydantic-ai messages: user messages and tool results as
    request parts (consecutive ones in one ``ModelRequest``), assistant messages as responses
    with their text and tool calls; the instructions on the last request, where pydantic-ai's
    models read them."""
    out: list[pm.ModelMessage] = []
    parts: list[pm.ModelRequestPart] = []
    for message in request.messages:
        if message.role == "assistant":
            if parts:
                out.append(pm.ModelRequest(parts=parts))
                parts = []
            out.append(_response_of(message))
        elif message.role == "tool":
            parts.append(
                pm.ToolReturnPart(
                    tool_name=message.tool_name or "",
                    content=message.text,
                    tool_call_id=message.tool_call_id or "",
                )
            )
        else:
            parts.append(pm.UserPromptPart(content=message.text))
    out.append(pm.ModelRequest(parts=parts, instructions=request.instructions or None))
    return out


def _response_of(message: ChatMessage) -> pm.ModelResponse:
    reply: list[pm.ModelResponsePart] = []
    if message.text:
        reply.append(pm.TextPart(content=message.text))
    for call in message.tool_calls:
        reply.append(
            pm.ToolCallPart(
                tool_name=call.name, args=call.arguments, tool_call_id=call.provider_id or ""
            )
        )
    return pm.ModelResponse(parts=reply)


def to_response(response: pm.ModelResponse) -> ModelResponse:
    """A pydantic-ai response as fxdurable records it: its text parts joined, its tool calls
    with their arguments as the model sent them and the provider's call ids, its usage and
    finish reason (pydantic-ai's normalised one: ``stop``, ``length``, ``tool_call`` ...)."""
    text = "".join(p.content for p in response.parts if isinstance(p, pm.TextPart))
    calls: Sequence[Any] = [p for p in response.parts if isinstance(p, pm.ToolCallPart)]
    usage = response.usage
    return ModelResponse(
        text=text,
        tool_calls=tuple(
            ToolCallRequest(
                name=call.tool_name,
                arguments=call.args_as_json_str(),
                provider_id=call.tool_call_id or None,
            )
            for call in calls
        ),
        usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        stop_reason=response.finish_reason,
        stop_inferred=response.finish_reason is None,
    )
