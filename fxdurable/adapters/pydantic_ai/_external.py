"""pydantic-ai's external tools (``ExternalToolset``, a ``ToolDefinition(kind="external")``)
as fxdurable questions whose answer is the call's result.

pydantic-ai ends its run with ``DeferredToolRequests`` when the model calls such a tool, and
a later run continues from ``DeferredToolResults``. Under fxdurable the turn does not end: the
call parks the session on an ``fx.ask`` question (before its intent, holding no lease, durable
across any crash of the worker), and ``session.answer(tool_result(value))`` gives the call its
result: the turn resumes, the call completes with ``value`` (recorded once, never produced
again) and the model reads it. ``fx.deny(reason)`` makes the model read ``denied: <reason>``,
as pydantic-ai's ``ToolDenied`` would.

The answer travels as an ``fx.rewrite`` of the call's input to ``{RESULT_KEY: value}``: a
rewrite is what the questions of a call already record durably, validated against the tool
when answered; the model's own call, as its response recorded it, is what the model reads
back.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_ai.toolsets import ToolsetTool

from fxdurable.adapters.pydantic_ai._arguments import DefinedTool, ToolArguments
from fxdurable.errors import InvalidAnswerError
from fxdurable.runtime.hooks import Answer, rewrite
from fxdurable.runtime.tools import ToolContext

__all__ = ["RESULT_KEY", "ExternalTool", "NoExternalResultError", "tool_result"]

# The one key of a rewritten input that carries an external call's result.
RESULT_KEY = "fxdurable_result"


def tool_result(value: Any) -> Answer:
    """The answer to an external tool's question: ``value`` is the call's result, as the model
    reads it (a str as it is, anything else as JSON). ``session.answer(tool_result(...))``."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise InvalidAnswerError(f"an external call's result must be JSON: {exc}") from None
    return rewrite({RESULT_KEY: value})


class NoExternalResultError(Exception):
    """An external call was answered ``fx.allow()``: nothing outside gave it a result."""


class ExternalTool(DefinedTool):
    """An external pydantic-ai tool: nothing runs it here; its result is a person's (or an
    outside system's) answer to the question its call asks (:func:`tool_result`). Its input
    is the model's arguments, or, once answered, ``{RESULT_KEY: value}``."""

    __slots__ = ()

    def __init__(self, found: ToolsetTool[Any]) -> None:
        tool_def = found.tool_def

        async def execute(arguments: ToolArguments, ctx: ToolContext) -> Any:
            if set(arguments.values) != {RESULT_KEY}:
                raise NoExternalResultError(
                    f"{tool_def.name} runs outside the agent and was given no result (the "
                    "question was answered allow, not with tool_result(value))"
                )
            return arguments.values[RESULT_KEY]

        super().__init__(
            name=tool_def.name,
            description=tool_def.description or tool_def.name,
            input_model=ToolArguments,
            execute=execute,
            # Its "execution" hands back the recorded answer: running it again changes nothing.
            replay="safe",
        )
        object.__setattr__(self, "definition", found)
