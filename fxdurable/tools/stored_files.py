"""One session's stored files for one call: reads, writes through ``ctx.state``, and the
shell's materialise / run / write back. See :mod:`fxdurable.tools.stored_workspace`."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fxdurable.core.blobs import MAX_BLOB_BYTES
from fxdurable.core.codec import dumps
from fxdurable.core.session_state import MAX_STATE_BYTES
from fxdurable.errors import PathRefusedError, WorkspaceError
from fxdurable.tools.paths import RESERVED, confine
from fxdurable.tools.scratch import make_scratch
from fxdurable.tools.workspace import ChangeFn

if TYPE_CHECKING:
    from fxdurable.runtime.tools import ToolContext
    from fxdurable.tools.stored_blobs import BatchClaims, FileBlobs

__all__ = ["BASE_KEY", "PATH_KEY_PREFIX", "StoredFiles"]

BASE_KEY = "fx.ws"
PATH_KEY_PREFIX = "fx.ws:"
_SHOWN = 20  # paths named in a shell result's notes


class StoredFiles:
    """One session's stored files for one call, as :class:`~fxdurable.tools.workspace.Files`."""

    def __init__(
        self,
        blobs: FileBlobs,
        claims: BatchClaims,
        root: str,
        state: Mapping[str, Any],
        manifest: Mapping[str, str],
        ctx: ToolContext | None,
    ) -> None:
        """``ctx``: the call that may write (its own session's files), or None (read-only)."""
        self._blobs = blobs
        self._claims = claims
        self._root = root
        self._state = state
        self._manifest = manifest
        self._ctx = ctx

    def files(self) -> dict[str, str]:
        """Every file of the session, path -> digest: the base with the state's changes."""
        files = dict(self._manifest)
        for key in list(self._state):
            if key.startswith(PATH_KEY_PREFIX):
                digest = self._state.get(key)
                path = key[len(PATH_KEY_PREFIX) :]
                if digest is None:
                    files.pop(path, None)
                else:
                    files[path] = str(digest)
        return files

    def read(self, path: str) -> bytes:
        files = self.files()
        digest = files.get(path)
        if digest is None:
            if any(p.startswith(path + "/") for p in files):
                raise WorkspaceError(f"{path} is a directory; use glob_files to list its files")
            raise WorkspaceError(f"no such file: {path}")
        return self._blobs.get(digest, path)

    def list(self) -> list[str]:
        return sorted(self.files())

    def apply_edit(self, path: str, change: ChangeFn, *, execution_id: str) -> str:
        """Apply ``change`` to the file as this call sees it. Its state write commits with the
        call's result, so a re-executed call never finds its own earlier write applied: it
        applies the change once, fresh (nothing to detect)."""
        self._writer()
        files = self.files()
        if path not in files and any(p.startswith(path + "/") for p in files):
            raise WorkspaceError(f"{path} is a directory, not a file")
        parts = path.split("/")
        for n in range(1, len(parts)):
            if "/".join(parts[:n]) in files:
                raise WorkspaceError(f"cannot write {path}: a parent of it is a file")
        current = None if path not in files else self._blobs.get(files[path], path)
        after, result = change(current)
        self.write({path: after}, files)
        return result

    def write(self, changes: Mapping[str, bytes | None], files: Mapping[str, str]) -> None:
        """Put the changed contents' blobs, then set their state keys (None: deleted). Past
        the state's bound, or racing a sibling of its batch, nothing is set."""
        ctx = self._writer()
        self._claims.claim(ctx, self._root, {p: files.get(p) for p in changes})
        keys: dict[str, str | None] = {}
        for path, data in changes.items():
            digest = None if data is None else self._blobs.put(path, data)
            keys[PATH_KEY_PREFIX + path] = digest
        state = ctx.state
        projected = dict(state)
        for key, digest in keys.items():
            path = key[len(PATH_KEY_PREFIX) :]
            if self._manifest.get(path) == digest or (
                digest is None and path not in self._manifest
            ):
                projected.pop(key, None)  # back to what the base holds: no key needed
            else:
                projected[key] = digest
        size = len(dumps(projected).encode())
        if size > MAX_STATE_BYTES:
            changed = sum(1 for k in projected if k.startswith(PATH_KEY_PREFIX))
            raise WorkspaceError(
                f"this change would leave {changed} changed files recorded in the session's "
                f"state, {size} bytes of its {MAX_STATE_BYTES}-byte bound; nothing was "
                "written. Change fewer files (delete generated files, caches and build "
                "outputs in the same command), or start a new session"
            )
        for key in keys:
            if key in projected:
                state[key] = projected[key]
            else:
                state.delete(key)

    def _writer(self) -> ToolContext:
        if self._ctx is None:
            raise WorkspaceError(
                f"this session is a subagent's child: it reads the files of session "
                f"{self._root!r} and cannot change them (writes belong to that session's own "
                "calls); report the change you would make instead"
            )
        return self._ctx

    async def run_shell(
        self, command: str, *, timeout_s: float, output_limit: int, ctx: ToolContext
    ) -> str:
        """Materialise, run, write back what changed (see the module)."""
        from fxdurable.tools.shell import run_command

        files = self.files()
        scratch = await asyncio.to_thread(make_scratch)  # named after this process
        try:
            await asyncio.to_thread(self._materialise, scratch, files)
            output = await run_command(
                command, cwd=scratch, timeout_s=timeout_s, output_limit=output_limit, ctx=ctx
            )
            changes, skipped = await asyncio.to_thread(_changes, scratch, files)
            notes = []
            if changes and self._ctx is not None:
                await asyncio.to_thread(self.write, changes, files)
                notes.append(_summary(changes))
            elif changes:
                notes.append(
                    f"[workspace: {len(changes)} changed files not kept: this subagent's "
                    f"child session cannot change session {self._root!r}'s files]"
                )
            if skipped:
                notes.append(f"[workspace: not kept: {_names(skipped)}]")
            return "\n".join([output, *notes]) if notes else output
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)

    def _materialise(self, scratch: Path, files: Mapping[str, str]) -> None:
        for path, digest in files.items():
            target = scratch / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self._blobs.get(digest, path))


def _changes(scratch: Path, before: Mapping[str, str]) -> tuple[dict[str, bytes | None], list[str]]:
    """What a command changed in ``scratch``: new or changed regular files (their bytes),
    files of ``before`` gone (None); and what cannot be written back (described)."""
    changes: dict[str, bytes | None] = {}
    skipped: list[str] = []
    seen: set[str] = set()
    for top, dirs, names in os.walk(scratch):
        base = Path(top).relative_to(scratch)
        if top == str(scratch) and RESERVED in dirs:
            dirs.remove(RESERVED)
            skipped.append(f"{RESERVED}/ (reserved)")
        for name in list(dirs):
            if os.path.islink(os.path.join(top, name)):
                skipped.append(f"{(base / name).as_posix()} (a symlink)")
        for name in names:
            rel = (base / name).as_posix()
            mode = os.lstat(os.path.join(top, name)).st_mode
            if not stat.S_ISREG(mode):
                kind = "a symlink" if stat.S_ISLNK(mode) else "a special file"
                skipped.append(f"{rel} ({kind})")
                continue
            try:
                if confine(rel) != rel:
                    raise PathRefusedError(rel, "not a plain workspace path")
            except PathRefusedError:
                skipped.append(f"{rel} (a name a workspace cannot hold)")
                continue
            seen.add(rel)  # present: never taken for deleted, even when not kept below
            try:
                data = (scratch / rel).read_bytes()
            except OSError as exc:  # the command made it unreadable (chmod 000)
                skipped.append(f"{rel} (unreadable: {exc.strerror})")
                continue
            if len(data) > MAX_BLOB_BYTES:
                skipped.append(f"{rel} (over {MAX_BLOB_BYTES} bytes)")
                continue
            if before.get(rel) != hashlib.sha256(data).hexdigest():
                changes[rel] = data
    for path in before:
        if path not in seen:
            changes[path] = None
    return changes, sorted(skipped)


def _summary(changes: Mapping[str, bytes | None]) -> str:
    written = sorted(p for p, d in changes.items() if d is not None)
    deleted = sorted(p for p, d in changes.items() if d is None)
    parts = []
    for label, paths in (("written back", written), ("deleted", deleted)):
        if paths:
            parts.append(f"{len(paths)} {label} ({_names(paths)})")
    return f"[workspace: {'; '.join(parts)}]"


def _names(items: Sequence[str]) -> str:
    return ", ".join(items[:_SHOWN]) + (", ..." if len(items) > _SHOWN else "")
