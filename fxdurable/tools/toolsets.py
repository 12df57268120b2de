"""The workspace tools as the lists an agent adds: all of them, or the read-only ones."""

from __future__ import annotations

from fxdurable.runtime.tools import ReplayPolicy, Tool
from fxdurable.tools.file_tools import (
    edit_file_tool,
    glob_files_tool,
    grep_files_tool,
    read_file_tool,
    write_file_tool,
)
from fxdurable.tools.shell import shell_tool
from fxdurable.tools.workspace import Workspace

__all__ = ["read_only_tools", "workspace_tools"]


def read_only_tools(workspace: Workspace) -> list[Tool]:
    """read_file, glob_files and grep_files: for an "explore" subagent, which (as a child
    session) sees its parent's files."""
    return [read_file_tool(workspace), glob_files_tool(workspace), grep_files_tool(workspace)]


def workspace_tools(
    workspace: Workspace,
    *,
    shell: bool = True,
    shell_replay: ReplayPolicy = "unsafe",
    shell_timeout_s: float = 120.0,
    output_limit: int = 30_000,
) -> list[Tool]:
    """read_file, glob_files, grep_files, edit_file, write_file and (unless ``shell=False``)
    shell, all working on ``workspace``."""
    tools = [*read_only_tools(workspace), edit_file_tool(workspace), write_file_tool(workspace)]
    if shell:
        tools.append(
            shell_tool(
                workspace,
                replay=shell_replay,
                timeout_s=shell_timeout_s,
                output_limit=output_limit,
            )
        )
    return tools
