"""The stored workspace: each session's files kept in the fxdurable store, not on a disk.

A worker on Lambda, or any worker of a pool, sees a session's files as its last committed step
left them, whichever host ran that step. A file's bytes are a blob (``store.put_blob``,
content-addressed); which blob each path holds is in the session's persisted state
(``ctx.state``):

- ``"fx.ws"``: the digest of the base manifest, a blob of JSON ``{path: digest}`` holding the
  template's files, written by the session's first workspace call (absent: no template);
- ``"fx.ws:<path>"``: the digest of the file's current content, or null for a file of the base
  deleted since. A path the state does not name is as the base has it.

A write puts its blob first and then sets the state key, and the state commits with the call's
result: a crash before that commit applied nothing, and the re-executed call (``edit_file`` and
``write_file`` are ``idempotent``) applies it once, to the files as committed. A fork copies
the state at its point, so it sees exactly the files of that point, and its writes are its
own. A subagent's child works on its root session's files (:func:`workspace_session`): it
reads the root's committed state, and its writes are refused (the root's state commits only
with the root's own calls).

``shell`` materialises the files into a scratch directory under ``$TMPDIR``, runs the command
there, and writes back what it changed (new and changed regular files, deleted files) as that
one call's state writes; symlinks, special files and names no workspace holds are not written
back, and the result says so. File modes are not kept: every file is materialised ``0644``
(run scripts with ``bash script.sh``). A scratch directory a killed process left behind is
removed by the next ``shell`` of a stored workspace on that host (:mod:`fxdurable.tools.scratch`).

Limits: each changed path costs its key and a 64-digit digest in the session state, bounded
by ``MAX_STATE_BYTES`` (64 KB): about 500 changed files with 50-character paths. A write past
that fails the call with a :class:`~fxdurable.errors.WorkspaceError` saying so, nothing
applied. A file holds at most ``MAX_BLOB_BYTES`` (32 MiB).

One call's view of the files (reads, writes, the shell) is
:class:`~fxdurable.tools.stored_files.StoredFiles`; ``ws.files_of(store, session_id)`` gives a
session's files as committed.

Parallel calls of one batch (``Agent(parallel_tools=True)``) that write different files all
persist (the state merges per key). Two that write the same file would each start from the
file as it was before the batch, and the later commit would silently drop the earlier
change: the second one to write it fails instead ("changed by another call of this batch"),
nothing applied, so the model writes it again after the batch, from the file as it is then.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fxdurable.errors import ConfigurationError
from fxdurable.runtime.tool_records import BlobWriter, ToolRecords
from fxdurable.tools import fsfiles
from fxdurable.tools.stored_blobs import BatchClaims, BlobCache, FileBlobs
from fxdurable.tools.stored_files import BASE_KEY, StoredFiles
from fxdurable.tools.workspace import workspace_session

if TYPE_CHECKING:
    from fxdurable.core.store import Store
    from fxdurable.runtime.tools import ToolContext

__all__ = ["BatchClaims", "BlobCache", "StoredWorkspace", "stored"]

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


class StoredWorkspace:
    """Sessions' files in the store (see the module). ``template``: a directory whose files
    each new session starts with, read (and put in the store) on first use per process."""

    def __init__(
        self,
        template: str | os.PathLike[str] | None = None,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.template = None if template is None else Path(template)
        if self.template is not None and not self.template.is_dir():
            raise ConfigurationError(f"workspace template {str(template)!r} is not a directory")
        self.cache = BlobCache(cache_bytes)
        self.claims = BatchClaims()
        self._bases: dict[str, str] = {}  # store url -> the template's manifest digest
        self._manifests: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, ctx: ToolContext) -> StoredFiles:
        if ctx.records is None:
            raise ConfigurationError(
                "the stored workspace keeps files in the runtime's store, and this call has "
                "none (ctx.records is None): run its tools in an fxdurable runtime"
            )
        blobs = FileBlobs(self.cache, ctx.records, ctx.blobs)
        root = workspace_session(ctx)
        if root == ctx.session_id:
            base = self._base(blobs, ctx.state)
            if base is not None and ctx.state.get(BASE_KEY) is None:
                ctx.state[BASE_KEY] = base  # pins the template as this session first saw it
            manifest = self._manifest(blobs, base)
            return StoredFiles(blobs, self.claims, root, ctx.state, manifest, ctx)
        # A subagent's child: its root's files as committed, read-only.
        state = _committed_state(ctx.records, root)
        manifest = self._manifest(blobs, self._base(blobs, state))
        return StoredFiles(blobs, self.claims, root, state, manifest, None)

    def files_of(self, store: Store, session_id: str) -> dict[str, bytes]:
        """Every file of ``session_id`` as its committed state has them, path -> bytes (to
        export a session's work, or to check it)."""
        blobs = FileBlobs(self.cache, ToolRecords(store), BlobWriter(store))
        state = _committed_state(blobs.records, session_id)
        manifest = self._manifest(blobs, self._base(blobs, state))
        files = StoredFiles(blobs, self.claims, session_id, state, manifest, None)
        return {path: files.read(path) for path in files.list()}

    def _base(self, blobs: FileBlobs, state: Mapping[str, Any]) -> str | None:
        """The session's base manifest digest: the one its state pins, else the template's."""
        base = state.get(BASE_KEY)
        if base is None and self.template is not None:
            return self._template_base(blobs)
        return None if base is None else str(base)

    def _manifest(self, blobs: FileBlobs, digest: str | None) -> dict[str, str]:
        if digest is None:
            return {}
        with self._lock:
            held = self._manifests.get(digest)
        if held is None:
            held = dict(json.loads(blobs.get(digest, "the workspace's base manifest")))
            with self._lock:
                self._manifests[digest] = held
                while len(self._manifests) > 64:
                    self._manifests.popitem(last=False)
        return held

    def _template_base(self, blobs: FileBlobs) -> str:
        """The template's manifest digest in the store: its files and the manifest put there
        once (the manifest last, so a manifest found proves its files are there)."""
        with self._lock:
            known = self._bases.get(blobs.url)
        if known is not None:
            return known
        assert self.template is not None
        files = {
            path: (self.template / path).read_bytes()
            for path in fsfiles.regular_files(self.template)
        }
        manifest = {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
        encoded = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        digest = hashlib.sha256(encoded).hexdigest()
        if blobs.records.get_blob(digest) is None:
            for path, data in files.items():
                blobs.put(path, data)
            blobs.put("the workspace's base manifest", encoded)
        with self._lock:
            self._bases[blobs.url] = digest
        return digest


def _committed_state(records: ToolRecords, session_id: str) -> dict[str, Any]:
    record = records.get_session(session_id)
    return {} if record is None else dict(record.state)


def stored(
    template: str | os.PathLike[str] | None = None, *, cache_bytes: int = DEFAULT_CACHE_BYTES
) -> StoredWorkspace:
    """A workspace whose files live in the fxdurable store (see
    :mod:`fxdurable.tools.stored_workspace`), each new session starting with the files of
    ``template`` (a directory) if given. ``cache_bytes`` bounds this process's cache of file
    contents (an LRU by digest)."""
    return StoredWorkspace(template, cache_bytes=cache_bytes)
