"""The directory workspace: each session's files in a directory of its own under ``root``.

``<root>/<session dir>`` holds the session's files (seeded from ``template`` on first use);
``<root>/.fxdurable/`` holds what the model never sees: ``tmp/`` (template copies before
they are renamed into place, so a session directory is either absent or complete) and
``ledger/<session dir>/<execution id>.json`` (which write each execution applied, so a
re-executed edit is detected, not doubled: :meth:`DirectoryFiles.apply_edit`).

A fork (a new session id) starts from the template again, not from its source's files: a
directory cannot be forked at a point in the past. (The stored workspace forks exactly.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from fxdurable.errors import ConfigurationError
from fxdurable.tools import fsfiles
from fxdurable.tools.workspace import ALREADY_APPLIED, ChangeFn, workspace_session

if TYPE_CHECKING:
    from fxdurable.runtime.tools import ToolContext

__all__ = ["DirectoryFiles", "DirectoryWorkspace", "directory", "safe_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_NAME = 120  # well inside a file name's 255 bytes, with room for the hash


def safe_name(session_id: str) -> str:
    """A directory name for ``session_id``: the id itself when it is plain
    (``[A-Za-z0-9._-]``, not starting with a dot, not too long), else the id with every other
    character replaced by ``_``, plus ``-`` and 8 hex digits of its sha256, so ids that
    differ only in replaced characters (``a/b``, ``a:b``) get different directories."""
    name = _UNSAFE.sub("_", session_id)
    if name.startswith("."):  # ".", "..", ".fxdurable": never the root, its parent, ours
        name = "_" + name[1:]
    if name == session_id and name and len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
    return f"{name[:_MAX_NAME]}-{digest}"


class DirectoryWorkspace:
    """Sessions' files in directories under ``root`` (created if missing)."""

    def __init__(self, root: str | os.PathLike[str], template: str | os.PathLike[str] | None):
        self.root = Path(os.path.realpath(root))
        self.template = None if template is None else Path(template)
        if self.template is not None and not self.template.is_dir():
            raise ConfigurationError(f"workspace template {str(template)!r} is not a directory")

    def session_dir(self, session_id: str) -> Path:
        """The directory of ``session_id``'s files (it may not exist yet)."""
        return self.root / safe_name(session_id)

    def open(self, ctx: ToolContext) -> DirectoryFiles:
        name = safe_name(workspace_session(ctx))
        where = self.root / name
        if not where.is_dir():
            self._seed(where)
        return DirectoryFiles(where, self.root / ".fxdurable" / "ledger" / name)

    def _seed(self, where: Path) -> None:
        """Create ``where`` complete or not at all: copy the template beside it, then rename.
        Two workers opening a new session at once both copy; one rename wins, the other's
        copy is deleted and the winner's used."""
        staging = self.root / ".fxdurable" / "tmp" / f"{where.name}-{secrets.token_hex(4)}"
        staging.parent.mkdir(parents=True, exist_ok=True)
        if self.template is None:
            staging.mkdir()
        else:
            shutil.copytree(self.template, staging, symlinks=True)
        try:
            os.rename(staging, where)
        except OSError:
            if not where.is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)  # lost the race: use the winner's
        fsfiles.fsync_dir(self.root)


def directory(
    root: str | os.PathLike[str], template: str | os.PathLike[str] | None = None
) -> DirectoryWorkspace:
    """A workspace of per-session directories under ``root``, each seeded with a copy of
    ``template`` (a directory) when its session first uses a workspace tool."""
    return DirectoryWorkspace(root, template)


class DirectoryFiles:
    """One session's directory, as :class:`~fxdurable.tools.workspace.Files`."""

    def __init__(self, where: Path, ledger: Path) -> None:
        self.where = where
        self.ledger = ledger

    def read(self, path: str) -> bytes:
        return fsfiles.read_regular(self.where, path)

    def list(self) -> list[str]:
        return fsfiles.regular_files(self.where)

    def apply_edit(self, path: str, change: ChangeFn, *, execution_id: str) -> str:
        """Apply ``change`` once per ``execution_id``: the ledger entry is written (and
        synced) before the file is replaced, so after a crash either the file holds the
        entry's ``after`` (detected: the recorded result, not applied again) or it does not
        (applied now, to the file as it is)."""
        entry_path = self.ledger / f"{_file_name(execution_id)}.json"
        current = fsfiles.read_for_write(self.where, path)
        if entry_path.exists():
            entry = json.loads(entry_path.read_text())
            if entry["path"] == path and entry["after_sha256"] == _sha(current):
                return str(entry["result"]) + ALREADY_APPLIED
        after, result = change(current)
        entry = {
            "path": path,
            "before_sha256": _sha(current),
            "after_sha256": _sha(after),
            "result": result,
        }
        self.ledger.mkdir(parents=True, exist_ok=True)
        fsfiles.write_atomic(entry_path, json.dumps(entry).encode())
        fsfiles.replace_file(self.where, path, after)
        return result

    async def run_shell(
        self, command: str, *, timeout_s: float, output_limit: int, ctx: ToolContext
    ) -> str:
        from fxdurable.tools.shell import run_command

        return await run_command(
            command, cwd=self.where, timeout_s=timeout_s, output_limit=output_limit, ctx=ctx
        )


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _file_name(execution_id: str) -> str:
    """Execution ids are ours and plain; anything else is hashed rather than trusted."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,100}", execution_id):
        return execution_id
    return hashlib.sha256(execution_id.encode()).hexdigest()
