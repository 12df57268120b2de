"""What kind of tool a tool is, for a person reading its calls: ``diff``, ``terminal``, ...

A console renders a call by its tool's kind, whatever the agent: an edit as a diff, a shell
command as a terminal, a read collapsed to its path, a subagent as its child's transcript.
The kind is presentation only: the runtime never looks at it, and it is not recorded.

``with_kind(tool, "diff")`` declares one (and returns the tool, so it reads inline in an
agent's tool list); :func:`kind_of` answers it. The workspace tools (``fxdurable.tools``) and
``fx.subagent(...)`` tools have their kinds without a declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeAlias, get_args

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.subagent import SubagentTool
from fxdurable.runtime.tools import Tool

__all__ = ["TOOL_KINDS", "ToolKind", "kind_of", "with_kind"]

# read: shows files (collapsed to its path or pattern); diff: changes a file (its result holds
# a unified diff after its first line); terminal: runs a command (progress streams its output,
# the result starts "exit code: N"); todo: writes a todo list (``state.changed``); plan: asks
# to approve a plan; subagent: runs a child session (its transcript nests).
ToolKind: TypeAlias = Literal["read", "diff", "terminal", "todo", "plan", "subagent"]
TOOL_KINDS: tuple[ToolKind, ...] = get_args(ToolKind)

# The workspace tools' kinds, by the names their factories give them.
_WORKSPACE_KINDS: Mapping[str, ToolKind] = {
    "read_file": "read",
    "glob_files": "read",
    "grep_files": "read",
    "edit_file": "diff",
    "write_file": "diff",
    "shell": "terminal",
}

# id(tool) -> (tool, kind): the tool is kept so that its id is never reused by another.
_DECLARED: dict[int, tuple[Tool, ToolKind]] = {}


def with_kind(tool: Tool, kind: ToolKind) -> Tool:
    """Declare ``tool``'s kind (see :data:`ToolKind`); returns ``tool`` itself."""
    if kind not in TOOL_KINDS:
        raise ConfigurationError(
            f"tool {tool.name!r}: kind must be one of {', '.join(TOOL_KINDS)}, not {kind!r}"
        )
    _DECLARED[id(tool)] = (tool, kind)
    return tool


def kind_of(tool: Tool) -> ToolKind | None:
    """``tool``'s declared kind; else ``subagent`` for a subagent's tool, the workspace tools'
    own by name; else None (a console shows a generic card)."""
    declared = _DECLARED.get(id(tool))
    if declared is not None and declared[0] is tool:
        return declared[1]
    if isinstance(tool, SubagentTool):
        return "subagent"
    return _WORKSPACE_KINDS.get(tool.name)
