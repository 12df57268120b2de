"""A stored workspace's files, written out to a directory: to look at what an agent did, run
its tests, or hand its work on (``fxdurable workspace export SESSION DIR --store URL``).

The files are the ones the session's committed state names (what its last recorded call left),
whichever worker or host wrote them. A subagent's child session exports its root session's
files, which are the ones it worked on. A directory workspace needs none of this: its files
are already in its session directory (``DirectoryWorkspace.session_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from fxdurable.errors import SessionNotFoundError, WorkspaceError
from fxdurable.runtime.tool_records import ToolRecords
from fxdurable.tools.paths import confine
from fxdurable.tools.stored_files import BASE_KEY, PATH_KEY_PREFIX
from fxdurable.tools.stored_workspace import StoredWorkspace
from fxdurable.tools.workspace import root_session

if TYPE_CHECKING:
    from fxdurable.core.store import Store

__all__ = ["export_workspace"]


def export_workspace(store: Store, session_id: str, target: str | os.PathLike[str]) -> list[str]:
    """Write every file of ``session_id``'s stored workspace into ``target`` (created if
    missing; it must be empty: nothing is overwritten) and return their paths, sorted.

    Raises :class:`~fxdurable.errors.SessionNotFoundError` for an unknown session and
    :class:`~fxdurable.errors.WorkspaceError` for a session that never used a stored
    workspace, a ``target`` that is not an empty directory, or a path in the store that is
    not a plain workspace path (nothing written then)."""
    records = ToolRecords(store)
    root = root_session(records, session_id)
    record = records.get_session(root)
    if record is None:
        raise SessionNotFoundError(session_id)
    if not any(key == BASE_KEY or key.startswith(PATH_KEY_PREFIX) for key in record.state):
        raise WorkspaceError(
            f"session {session_id!r} has no stored workspace files (its tools never used "
            "fxdurable.tools.stored()); a directory workspace's files are in its session "
            "directory already"
        )
    files = StoredWorkspace().files_of(store, root)
    for path in files:
        if confine(path) != path:  # written by a tool, so confined then; checked again here
            raise WorkspaceError(f"the store names a file {path!r}, which no workspace holds")
    where = Path(target)
    if where.exists() and (not where.is_dir() or any(where.iterdir())):
        raise WorkspaceError(
            f"{where} is not an empty directory; export into a new or empty one (nothing is "
            "overwritten)"
        )
    for path, data in sorted(files.items()):
        destination = where / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
    return sorted(files)
