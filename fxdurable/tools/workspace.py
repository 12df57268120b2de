"""The workspace protocol the tools are written against, and whose files a call works on.

A :class:`Workspace` hands each tool call the :class:`Files` of its session
(``workspace.open(ctx)``). The tools (:mod:`fxdurable.tools.file_tools`,
:mod:`fxdurable.tools.shell`) touch files only through these methods, so a new kind of
workspace implements exactly them. What an implementation must provide:

- ``open(ctx)`` -> the files of ``workspace_session(ctx)`` (a subagent's child sees its root
  ancestor's files), seeding them from a template the first time a session opens them.
  Called from a worker thread (sync tools) or via ``asyncio.to_thread`` (shell): it may block.
- ``read(path)`` -> the bytes of a regular file; :class:`~fxdurable.errors.WorkspaceError`
  ``"no such file: <path>"`` when there is none (a directory says so), and
  :class:`~fxdurable.errors.PathRefusedError` for what the storage itself refuses
  (a symlink out, a special file). ``path`` has been through :func:`~fxdurable.tools.paths.confine`.
- ``list()`` -> every regular file, workspace-relative posix paths, sorted (no ``.fxdurable``).
- ``apply_edit(path, change, execution_id=...)`` -> the result text of a write: call
  ``change(current bytes or None)``, which returns the new bytes and the result text or raises
  (nothing written then), and store the new bytes, so that a call re-executed with the same
  ``execution_id`` after a crash is *not applied twice*: if that execution's write is already
  in place, return its recorded result plus :data:`ALREADY_APPLIED` without calling
  ``change``. (A directory keeps a ledger; a store-backed workspace gets this for free when
  its writes commit atomically with the call's result.)
- ``run_shell(command, timeout_s=..., output_limit=..., ctx=...)`` (async) -> the shell
  tool's result text: the command run with the files as its working directory
  (:func:`fxdurable.tools.shell.run_command` does the running, given a directory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from fxdurable.runtime.tool_records import ToolRecords
    from fxdurable.runtime.tools import ToolContext

__all__ = ["ALREADY_APPLIED", "Change", "Files", "Workspace", "root_session", "workspace_session"]

ALREADY_APPLIED = " (already applied; not applied again)"


class Change(NamedTuple):
    """What a write turns a file into, and the text the tool returns for it."""

    after: bytes
    result: str


ChangeFn = Callable[[bytes | None], Change]


class Files(Protocol):
    """One session's files, for one tool call. Paths are already confined."""

    def read(self, path: str) -> bytes: ...

    def list(self) -> list[str]: ...

    def apply_edit(self, path: str, change: ChangeFn, *, execution_id: str) -> str: ...

    async def run_shell(
        self, command: str, *, timeout_s: float, output_limit: int, ctx: ToolContext
    ) -> str: ...


class Workspace(Protocol):
    """Where sessions' files live: a directory on this host, or the store."""

    def open(self, ctx: ToolContext) -> Files: ...


# session id (per store) -> its root ancestor's; parent_session never changes once written.
_ROOTS: dict[tuple[str, str], str] = {}
_MAX_CACHED = 10_000
_MAX_DEPTH = 64  # subagents nest a few levels; a longer chain is a loop in corrupt records


def workspace_session(ctx: ToolContext) -> str:
    """The session whose files a call works on: ``ctx.session_id``, except in a subagent's
    child session (its ``parent_session`` set), where it is the root ancestor's, so an
    explore subagent sees its parent's files. Outside a runtime (``ctx.records`` None): the
    call's own session."""
    if ctx.records is None:
        return ctx.session_id
    return root_session(ctx.records, ctx.session_id)


def root_session(records: ToolRecords, session_id: str) -> str:
    """``session_id``'s root ancestor (following ``parent_session``), or itself: the session
    whose files a subagent's child works on."""
    key = (records.url, session_id)
    cached = _ROOTS.get(key)
    if cached is not None:
        return cached
    for _ in range(_MAX_DEPTH):
        record = records.get_session(session_id)
        if record is None or record.parent_session is None:
            break
        session_id = record.parent_session
    if len(_ROOTS) >= _MAX_CACHED:
        _ROOTS.clear()
    _ROOTS[key] = session_id
    return session_id
