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

from fxdurable.core.blobs import MAX_BLOB_BYTES
from fxdurable.errors import BlobTooLargeError, ConfigurationError, WorkspaceError
from fxdurable.tools import fsfiles
from fxdurable.tools.stored_files import BASE_KEY, StoredFiles
from fxdurable.tools.workspace import workspace_session

if TYPE_CHECKING:
    from fxdurable.core.store import Store
    from fxdurable.runtime.tools import ToolContext

__all__ = ["BatchClaims", "BlobCache", "StoredWorkspace", "stored"]

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
_MAX_CLAIMS = 10_000  # writes remembered for the batch check (a batch is a few calls)


class BlobCache:
    """Blobs by digest, least recently used dropped past ``limit`` bytes. A blob never
    changes, so a cached one is never stale, whichever store or session it came from."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> bytes | None:
        with self._lock:
            data = self._held.get(digest)
            if data is not None:
                self._held.move_to_end(digest)
            return data

    def put(self, digest: str, data: bytes) -> None:
        if len(data) > self.limit:
            return
        with self._lock:
            if digest in self._held:
                return
            self._held[digest] = data
            self._bytes += len(data)
            while self._bytes > self.limit:
                _, dropped = self._held.popitem(last=False)
                self._bytes -= len(dropped)


class BatchClaims:
    """Which call of a parallel batch wrote a path, and from which content: a sibling that
    writes the same path from the same content would drop that write (see the module)."""

    def __init__(self) -> None:
        self._claims: OrderedDict[tuple[str, ...], tuple[str, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, ctx: ToolContext, root: str, bases: Mapping[str, str | None]) -> None:
        """Record ``ctx``'s writes (path -> the digest it started from), or raise if a
        sibling wrote one of those paths from the same content; nothing recorded then."""
        if not ctx.turn_id or ctx.store is None:
            return  # outside a runtime's turn: no batch
        batch = (ctx.store.url, root, ctx.turn_id, str(ctx.round))
        with self._lock:
            for path, base in bases.items():
                held = self._claims.get((*batch, path))
                if held is not None and held[0] != ctx.execution_id and held[1] == base:
                    raise WorkspaceError(
                        f"{path} is being changed by another call of this same batch of "
                        "parallel tool calls; this call's change to it was not applied (it "
                        "would overwrite that one). Read the file again after this batch and "
                        "make the change then"
                    )
            for path, base in bases.items():
                self._claims[(*batch, path)] = (ctx.execution_id, base)
            while len(self._claims) > _MAX_CLAIMS:
                self._claims.popitem(last=False)


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
        store = ctx.store
        if store is None:
            raise ConfigurationError(
                "the stored workspace keeps files in the runtime's store, and this call has "
                "none (ctx.store is None): run its tools in an fxdurable runtime"
            )
        root = workspace_session(ctx)
        if root == ctx.session_id:
            base = self._base(store, ctx.state)
            if base is not None and ctx.state.get(BASE_KEY) is None:
                ctx.state[BASE_KEY] = base  # pins the template as this session first saw it
            return StoredFiles(self, store, root, ctx.state, self._manifest(store, base), ctx)
        # A subagent's child: its root's files as committed, read-only.
        state = self._committed_state(store, root)
        manifest = self._manifest(store, self._base(store, state))
        return StoredFiles(self, store, root, state, manifest, None)

    def files_of(self, store: Store, session_id: str) -> dict[str, bytes]:
        """Every file of ``session_id`` as its committed state has them, path -> bytes (to
        export a session's work, or to check it)."""
        state = self._committed_state(store, session_id)
        manifest = self._manifest(store, self._base(store, state))
        files = StoredFiles(self, store, session_id, state, manifest, None)
        return {path: files.read(path) for path in files.list()}

    def _committed_state(self, store: Store, session_id: str) -> dict[str, Any]:
        record = store.read(lambda view: view.get_session(session_id))
        return {} if record is None else dict(record.state)

    def _base(self, store: Store, state: Mapping[str, Any]) -> str | None:
        """The session's base manifest digest: the one its state pins, else the template's."""
        base = state.get(BASE_KEY)
        if base is None and self.template is not None:
            return self._template_base(store)
        return None if base is None else str(base)

    # -- blobs ------------------------------------------------------------------------------

    def blob(self, store: Store, digest: str, path: str) -> bytes:
        data = self.cache.get(digest)
        if data is None:
            data = store.get_blob(digest)
            if data is None:
                raise WorkspaceError(
                    f"the content of {path} (blob {digest[:16]}) is missing from the store"
                )
            self.cache.put(digest, data)
        return data

    def put(self, store: Store, path: str, data: bytes) -> str:
        try:
            digest = store.put_blob(data)
        except BlobTooLargeError as exc:
            raise WorkspaceError(
                f"{path} would be {len(data)} bytes, over the {MAX_BLOB_BYTES}-byte limit of "
                "a file in a stored workspace; nothing was written"
            ) from exc
        self.cache.put(digest, data)
        return digest

    def _manifest(self, store: Store, digest: str | None) -> dict[str, str]:
        if digest is None:
            return {}
        with self._lock:
            held = self._manifests.get(digest)
        if held is None:
            held = dict(json.loads(self.blob(store, digest, "the workspace's base manifest")))
            with self._lock:
                self._manifests[digest] = held
                while len(self._manifests) > 64:
                    self._manifests.popitem(last=False)
        return held

    def _template_base(self, store: Store) -> str:
        """The template's manifest digest in ``store``: its files and the manifest put there
        once (the manifest last, so a manifest found proves its files are there)."""
        with self._lock:
            known = self._bases.get(store.url)
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
        if store.get_blob(digest) is None:
            for path, data in files.items():
                self.put(store, path, data)
            self.put(store, "the workspace's base manifest", encoded)
        with self._lock:
            self._bases[store.url] = digest
        return digest


def stored(
    template: str | os.PathLike[str] | None = None, *, cache_bytes: int = DEFAULT_CACHE_BYTES
) -> StoredWorkspace:
    """A workspace whose files live in the fxdurable store (see
    :mod:`fxdurable.tools.stored_workspace`), each new session starting with the files of
    ``template`` (a directory) if given. ``cache_bytes`` bounds this process's cache of file
    contents (an LRU by digest)."""
    return StoredWorkspace(template, cache_bytes=cache_bytes)
