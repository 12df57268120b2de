"""Workspace tools: files and a shell for an agent, confined to a per-session workspace.

``from fxdurable import tools as fxt``; ``ws = fxt.directory(root, template=...)``;
``fx.Agent(..., tools=fxt.workspace_tools(ws))``. See the README's "Workspace tools".

- :mod:`~fxdurable.tools.workspace`: the :class:`Workspace`/:class:`Files` protocol the tools
  are written against (what a new kind of workspace implements) and
  :func:`workspace_session` (a subagent's child works on its root ancestor's files);
- :mod:`~fxdurable.tools.paths`: path confinement shared by every workspace;
- :mod:`~fxdurable.tools.directory_workspace`: per-session directories under a root;
- :mod:`~fxdurable.tools.stored_workspace`: sessions' files in the fxdurable store;
  :mod:`~fxdurable.tools.workspace_export`: a session's stored files written to a directory;
- :mod:`~fxdurable.tools.file_tools`, :mod:`~fxdurable.tools.shell`: the tools;
- :mod:`~fxdurable.tools.toolsets`: the lists an agent adds.

Every name is imported on first use, like ``fxdurable``'s own: ``import fxdurable.tools``
loads none of the runtime (``tests/tools/test_ws_imports.py``). No module is named like a
function it exports (``directory_workspace``, not ``directory``): importing a submodule sets
it as an attribute of the package, which would shadow the lazily exported function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fxdurable.core.lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; the table below is what runs
    from fxdurable.errors import EditError, PathRefusedError, WorkspaceError
    from fxdurable.tools.directory_workspace import DirectoryWorkspace, directory
    from fxdurable.tools.file_tools import (
        edit_file_tool,
        glob_files_tool,
        grep_files_tool,
        read_file_tool,
        write_file_tool,
    )
    from fxdurable.tools.paths import confine
    from fxdurable.tools.shell import shell_tool
    from fxdurable.tools.stored_workspace import StoredWorkspace, stored
    from fxdurable.tools.toolsets import read_only_tools, workspace_tools
    from fxdurable.tools.workspace import Files, Workspace, workspace_session
    from fxdurable.tools.workspace_export import export_workspace

__all__ = [
    "DirectoryWorkspace",
    "EditError",
    "Files",
    "PathRefusedError",
    "StoredWorkspace",
    "Workspace",
    "WorkspaceError",
    "confine",
    "directory",
    "edit_file_tool",
    "export_workspace",
    "glob_files_tool",
    "grep_files_tool",
    "read_file_tool",
    "read_only_tools",
    "shell_tool",
    "stored",
    "workspace_session",
    "workspace_tools",
    "write_file_tool",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "fxdurable.errors": ("EditError", "PathRefusedError", "WorkspaceError"),
            "fxdurable.tools.directory_workspace": ("DirectoryWorkspace", "directory"),
            "fxdurable.tools.file_tools": (
                "edit_file_tool",
                "glob_files_tool",
                "grep_files_tool",
                "read_file_tool",
                "write_file_tool",
            ),
            "fxdurable.tools.paths": ("confine",),
            "fxdurable.tools.shell": ("shell_tool",),
            "fxdurable.tools.stored_workspace": ("StoredWorkspace", "stored"),
            "fxdurable.tools.toolsets": ("read_only_tools", "workspace_tools"),
            "fxdurable.tools.workspace": ("Files", "Workspace", "workspace_session"),
            "fxdurable.tools.workspace_export": ("export_workspace",),
        },
    )
