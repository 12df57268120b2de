"""A LangChain chat model behind fxdurable's model boundary (``runtime.models.base.Model``).

Each model step of the turn driver sends the conversation the journal holds (rebuilt by
:mod:`fxdurable.runtime.history` on every request, after a crash too) as LangChain messages to
the chat model bound to the agent's LangChain tools (``bind_tools``, so each provider gets the
tool schemas LangChain makes for it), streamed with ``astream`` (or one ``ainvoke``), and
hands back text deltas and one finish: the driver records the response at the finish, with
the tool calls it asked for, exactly as for a provider model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool

from fxdurable.core.records import ToolCallRequest, Usage
from fxdurable.runtime.models.base import (
    ChatMessage,
    Finish,
    ModelRequest,
    ModelResponse,
    StreamPart,
    TextDelta,
)

__all__ = ["ChatModel", "message_of", "to_messages", "to_response"]


class ChatModel:
    """fxdurable's :class:`~fxdurable.runtime.models.base.Model` over a LangChain
    ``BaseChatModel``, bound once to ``tools`` (``bind_tools``) when there are any.
    ``stream=False`` makes one ``ainvoke`` per step instead of ``astream``."""

    def __init__(
        self, model: BaseChatModel, tools: Sequence[BaseTool], *, stream: bool = True
    ) -> None:
        self._model = model
        self._bound: Runnable[LanguageModelInput, BaseMessage] = (
            model.bind_tools(list(tools)) if tools else model
        )
        self._streamed = stream

    @property
    def name(self) -> str:
        found = getattr(self._model, "model_name", None) or getattr(self._model, "model", None)
        return f"langchain:{found if isinstance(found, str) else self._model._llm_type}"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        messages = to_messages(request)
        if not self._streamed:
            yield Finish(to_response(await self._bound.ainvoke(messages)))
            return
        whole: AIMessageChunk | None = None
        async for chunk in self._bound.astream(messages):
            if not isinstance(chunk, AIMessageChunk):
                continue
            whole = chunk if whole is None else whole + chunk
            text = text_of(chunk.content)
            if text:
                yield TextDelta(text)
        # The finish comes once the chunks are summed (tool-call arguments complete): the
        # driver records the response here, before any call runs.
        yield Finish(to_response(whole if whole is not None else AIMessage(content="")))


def text_of(content: str | list[str | dict[str, Any]]) -> str:
    """A message's text: its string content, or its text blocks joined (Anthropic-style
    content lists; other blocks, such as reasoning, are not text)."""
    if isinstance(content, str):
        return content
    return "".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or block.get("type") == "text"
    )


def to_messages(request: ModelRequest) -> list[BaseMessage]:
    """The journal's conversation as LangChain messages: the instructions as the system
    message, user messages as ``HumanMessage``, assistant replies as ``AIMessage`` with their
    tool calls (under the ids the history gives them), tool results as ``ToolMessage``."""
    out: list[BaseMessage] = []
    if request.instructions:
        out.append(SystemMessage(content=request.instructions))
    for message in request.messages:
        out.append(message_of(message))
    return out


def message_of(message: ChatMessage) -> BaseMessage:
    if message.role == "assistant":
        return AIMessage(
            content=message.text,
            tool_calls=[
                {
                    "name": call.name,
                    "args": _args_of(call.arguments),
                    "id": call.provider_id or "",
                    "type": "tool_call",
                }
                for call in message.tool_calls
            ],
        )
    if message.role == "tool":
        return ToolMessage(
            content=message.text, tool_call_id=message.tool_call_id or "", name=message.tool_name
        )
    return HumanMessage(content=message.text)


def _args_of(arguments: str) -> dict[str, Any]:
    # A recorded call's arguments as the model sent them; ones that were not a JSON object
    # (the call failed validation) are sent back as the raw text, under one key.
    try:
        decoded = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return decoded if isinstance(decoded, dict) else {"arguments": decoded}


def to_response(message: BaseMessage) -> ModelResponse:
    """A LangChain reply as fxdurable records it: its text, its tool calls (arguments as
    JSON, the provider's call ids), its usage and the provider's finish reason, verbatim
    (``finish_reason`` or ``stop_reason`` in its response metadata)."""
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    # Calls whose arguments LangChain could not parse are recorded as sent: the tool's
    # validation fails them and the model reads why, instead of the call vanishing.
    broken = message.invalid_tool_calls if isinstance(message, AIMessage) else []
    usage = message.usage_metadata if isinstance(message, AIMessage) else None
    meta = message.response_metadata or {}
    stop = meta.get("finish_reason") or meta.get("stop_reason")
    return ModelResponse(
        text=text_of(message.content),
        tool_calls=tuple(
            ToolCallRequest(
                name=call["name"],
                arguments=json.dumps(call["args"], separators=(",", ":")),
                provider_id=call.get("id") or None,
            )
            for call in calls
        )
        + tuple(
            ToolCallRequest(
                name=call["name"], arguments=call["args"] or "", provider_id=call["id"] or None
            )
            for call in broken
            if call["name"]
        ),
        usage=Usage(
            input_tokens=usage["input_tokens"] if usage else 0,
            output_tokens=usage["output_tokens"] if usage else 0,
        ),
        stop_reason=stop if isinstance(stop, str) else None,
        stop_inferred=not isinstance(stop, str),
    )
