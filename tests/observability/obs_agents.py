"""The agent of the tracing tests, importable by an RQ job (``FXD_AGENTS``)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pydantic

import fxdurable as fx
from fxdurable.runtime.models.base import Finish, ModelRequest, StreamPart

PROMPT = "PROMPT-SECRET deploy the thing"
TOOL_OUTPUT = "TOOL-OUTPUT-SECRET"
ANSWER = "FINAL-ANSWER-SECRET"


class Query(pydantic.BaseModel):
    q: str


class WithStopReasons:
    """A scripted model that reports a provider's stop reasons, as real providers do."""

    def __init__(self, inner: fx.ScriptedModel) -> None:
        self._inner = inner
        self.name = inner.name

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamPart]:
        async for part in self._inner.stream(request):
            if isinstance(part, Finish):
                response = part.response
                stop = "tool_use" if response.tool_calls else "end_turn"
                part = Finish(dataclasses.replace(response, stop_reason=stop))
            yield part


@fx.tool(replay="idempotent")
def lookup(inp: Query, ctx: fx.ToolContext) -> str:
    "Look something up."
    return TOOL_OUTPUT


def agent() -> fx.Agent:
    model = fx.ScriptedModel(
        [fx.reply("checking", fx.call("lookup", q="TOOL-INPUT-SECRET")), fx.reply(ANSWER)]
    )
    return fx.Agent("eng", WithStopReasons(model), tools=[lookup])


def agents() -> list[fx.Agent]:
    return [agent()]
