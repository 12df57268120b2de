"""fxdurable tools added to a framework's agent: what every adapter shares.

Each adapter's ``durable_agent(..., tools=[...])`` (and LangChain's ``DurableMiddleware(tools=
[...])``) takes :class:`~fxdurable.runtime.tools.Tool` objects besides the framework's own
tools: ``fx.mcp_tools(server)``'s above all, or any ``fx.define_tool``. Such a tool is run by
fxdurable's turn driver as it is, exactly as in one of fxdurable's own agents (its replay
policy, its ``ToolContext``, an MCP call's ``_meta``); the framework only has to *show* it to
its model. :func:`shown` gives what every framework's tool definition is made of: the name,
the description and the JSON schema of the arguments (an MCP tool's is the server's own, byte
for byte); each adapter builds its framework's object from it (a pydantic-ai
``ToolDefinition``, an Agents SDK ``FunctionTool``, a LangChain ``StructuredTool``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.tools import Tool

__all__ = ["ShownTool", "added_tools", "shown"]


@dataclass(frozen=True, slots=True)
class ShownTool:
    """What a framework's model is shown of an fxdurable tool."""

    name: str
    description: str
    parameters: dict[str, Any]


def shown(tool: Tool) -> ShownTool:
    """``tool`` as a model sees it (a copy of its schema: frameworks may add to theirs)."""
    return ShownTool(tool.name, tool.description, dict(tool.json_schema()))


def added_tools(tools: Sequence[object], *, agent: str, taken: Collection[str]) -> list[Tool]:
    """``tools`` checked: each an fxdurable :class:`Tool` (``fx.mcp_tools(...)``'s, say), no
    two of one name, and none named as one of the framework agent's own (``taken``): a model
    calls a tool by its name, so a clash would make one of them unreachable."""
    found: list[Tool] = []
    names = set(taken)
    for tool in tools:
        if not isinstance(tool, Tool):
            raise ConfigurationError(
                f"{agent}: tools=[...] takes fxdurable tools (fx.mcp_tools(...), "
                f"fx.define_tool(...)), not {type(tool).__name__}; the framework's own tools "
                "go on the framework's agent"
            )
        if tool.name in names:
            raise ConfigurationError(
                f"{agent}: two tools are named {tool.name!r}; give fx.mcp_tools a prefix= "
                "(or rename one)"
            )
        names.add(tool.name)
        found.append(tool)
    return found
