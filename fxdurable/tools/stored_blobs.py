"""What the stored workspace's pieces share: blobs (a process's cache of them, and one call's
reads and writes of them) and the batch check of parallel writers. Its own module so that
:mod:`fxdurable.tools.stored_workspace` (sessions' files) and
:mod:`fxdurable.tools.stored_files` (one call's view of them) both build on it without
importing each other."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fxdurable.core.blobs import MAX_BLOB_BYTES
from fxdurable.errors import BlobTooLargeError, WorkspaceError

if TYPE_CHECKING:
    from fxdurable.runtime.tool_records import BlobWriter, ToolRecords
    from fxdurable.runtime.tools import ToolContext

__all__ = ["BatchClaims", "BlobCache", "FileBlobs"]

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
        if not ctx.turn_id or ctx.records is None:
            return  # outside a runtime's turn: no batch
        batch = (ctx.records.url, root, ctx.turn_id, str(ctx.round))
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


class FileBlobs:
    """One call's (or one export's) blobs: read through ``cache``, put with ``writer``
    (None: this view writes nothing)."""

    __slots__ = ("cache", "records", "writer")

    def __init__(self, cache: BlobCache, records: ToolRecords, writer: BlobWriter | None) -> None:
        self.cache = cache
        self.records = records
        self.writer = writer

    @property
    def url(self) -> str:
        return self.records.url

    def get(self, digest: str, path: str) -> bytes:
        data = self.cache.get(digest)
        if data is None:
            data = self.records.get_blob(digest)
            if data is None:
                raise WorkspaceError(
                    f"the content of {path} (blob {digest[:16]}) is missing from the store"
                )
            self.cache.put(digest, data)
        return data

    def put(self, path: str, data: bytes) -> str:
        if self.writer is None:
            raise WorkspaceError(f"cannot write {path}: this view of the files is read-only")
        try:
            digest = self.writer.put(data)
        except BlobTooLargeError as exc:
            raise WorkspaceError(
                f"{path} would be {len(data)} bytes, over the {MAX_BLOB_BYTES}-byte limit of "
                "a file in a stored workspace; nothing was written"
            ) from exc
        self.cache.put(digest, data)
        return digest
