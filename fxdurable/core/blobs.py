"""Content-addressed blobs: what every store's ``put_blob``/``get_blob`` share.

A blob is named by the lowercase hex sha256 of its bytes, so a put is idempotent (the same
bytes are the same blob, whoever puts them, however often) and a blob never changes. Blobs
live beside the records, outside any transaction: a caller puts a blob first and then
commits a record (a session's state) that names its digest, so a committed reference never
points at a missing blob, and a blob whose referencing commit never happened is an orphan
nobody reads. A store verifies every blob it reads against its digest
(:func:`verified`): damaged bytes raise, they are never returned. A store lists the digests
it holds (``blob_digests``) a page at a time; the SQL stores page by key (:func:`by_page`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence

from fxdurable.errors import BlobCorruptError, BlobTooLargeError

__all__ = ["DIGEST_PAGE", "MAX_BLOB_BYTES", "blob_digest", "by_page", "is_digest", "verified"]

# One blob's bytes. Large enough for any source file or small artefact a workspace holds;
# small enough that a read (which holds the whole blob in memory) stays cheap everywhere.
MAX_BLOB_BYTES = 32 * 1024 * 1024

_DIGEST = re.compile(r"[0-9a-f]{64}")

# Digests one page of ``blob_digests`` holds: 64 KB of keys, one short read each.
DIGEST_PAGE = 1000


def blob_digest(data: bytes) -> str:
    """The digest ``data`` is stored under; raises :class:`BlobTooLargeError` past the limit
    (before anything is written)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"a blob is bytes, not {type(data).__name__}")
    if len(data) > MAX_BLOB_BYTES:
        raise BlobTooLargeError(len(data), MAX_BLOB_BYTES)
    return hashlib.sha256(data).hexdigest()


def is_digest(digest: object) -> bool:
    """Whether ``digest`` could name a blob (64 lowercase hex digits). Anything else names
    none: ``get_blob`` answers None for it without asking the backend."""
    return isinstance(digest, str) and _DIGEST.fullmatch(digest) is not None


def verified(digest: str, data: bytes, where: str) -> bytes:
    """``data`` if it hashes to ``digest``; else :class:`BlobCorruptError` naming the store."""
    if hashlib.sha256(data).hexdigest() != digest:
        raise BlobCorruptError(
            f"blob {digest} in {where} does not match its digest ({len(data)} bytes read): "
            "the stored copy is damaged; it was not returned"
        )
    return data


def by_page(after: Callable[[str, int], Sequence[str]], page: int = DIGEST_PAGE) -> Iterator[str]:
    """Every digest, in order, from ``after(last, n)`` (the first ``n`` digests past ``last``,
    in order; ``""`` sorts before all): one call per page, nothing held between pages."""
    last = ""
    while True:
        found = after(last, page)
        yield from found
        if len(found) < page:
            return
        last = found[-1]
