"""Images and documents in prompts and tool results (docs/attachments.md).

A user hands an :class:`~fxdurable.runtime.models.base.Attachment` (``fx.Attachment``; made
with :func:`attachment_from_path`, :func:`attachment_from_bytes` or
:func:`attachment_from_url`). Before anything is committed its bytes become a
content-addressed blob of the store (:func:`store_attachments`, outside any transaction, as
blobs are written), and the records keep only an
:class:`~fxdurable.core.records.AttachmentRef`: events and records never hold the bytes.

When a turn's request is built from the records, each stored ref is first a
:class:`StoredAttachment` (its digest, no bytes: built inside the read, where no blob may be
fetched), then :class:`AttachmentLoader` reads the blobs after the read, once per digest for
the turn. A blob that is missing fails the turn (:class:`~fxdurable.errors.AttachmentError`):
an image is never silently dropped from what the model reads.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from fxdurable.core.blobs import MAX_BLOB_BYTES
from fxdurable.core.records import ATTACHMENT_TYPES, AttachmentRef
from fxdurable.errors import AttachmentError
from fxdurable.runtime.models.base import Attachment, ChatMessage, ModelRequest

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "AttachmentLoader",
    "StoredAttachment",
    "ToolResult",
    "attachment_from_bytes",
    "attachment_from_path",
    "attachment_from_url",
    "checked",
    "from_ref",
    "store_attachments",
]

# One attachment's bytes: one blob's limit. Providers take less per image (Anthropic 5 MB,
# OpenAI 20 MB at the time of writing); the provider's own refusal is what the turn reports.
MAX_ATTACHMENT_BYTES = MAX_BLOB_BYTES

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


def sniff(data: bytes) -> str | None:
    """The media type ``data``'s first bytes say it is (one of ATTACHMENT_TYPES), or None."""
    head = bytes(data[:16])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)


def _allowed(media_type: str) -> str:
    if media_type not in ATTACHMENT_TYPES:
        raise AttachmentError(
            f"media type {media_type!r} is not one an attachment may have "
            f"({', '.join(sorted(ATTACHMENT_TYPES))})"
        )
    return media_type


def checked(attachment: Attachment) -> Attachment:
    """``attachment`` if it may be sent; else :class:`AttachmentError` (nothing written).
    Bytes must be what ``media_type`` says (their magic bytes) and at most
    :data:`MAX_ATTACHMENT_BYTES`; a URL must be ``https:``; exactly one of the two."""
    if not isinstance(attachment, Attachment):
        raise AttachmentError(f"an attachment is an fx.Attachment, not {type(attachment).__name__}")
    _allowed(attachment.media_type)
    if (attachment.data is None) == (attachment.url is None):
        raise AttachmentError("an attachment has its bytes (data) or a URL, exactly one of them")
    if attachment.url is not None:
        if not attachment.url.startswith("https://") or len(attachment.url) <= len("https://"):
            raise AttachmentError(f"an attachment URL must be https://, not {attachment.url!r}")
        return attachment
    data = attachment.data
    assert data is not None
    if len(data) > MAX_ATTACHMENT_BYTES:
        raise AttachmentError(
            f"an attachment of {len(data)} bytes is over the {MAX_ATTACHMENT_BYTES}-byte limit"
        )
    found = sniff(data)
    if found != attachment.media_type:
        raise AttachmentError(
            f"the bytes given as {attachment.media_type} are "
            + (f"{found}" if found is not None else "none of the attachment types")
        )
    return attachment


def attachment_from_bytes(
    data: bytes, *, media_type: str | None = None, name: str | None = None
) -> Attachment:
    """An attachment of ``data``; ``media_type`` defaults to what its magic bytes say."""
    kind = media_type if media_type is not None else sniff(data)
    if kind is None:
        raise AttachmentError(
            "the bytes are none of the attachment types (PNG, JPEG, GIF, WEBP, PDF)"
        )
    return checked(Attachment(media_type=kind, data=bytes(data), name=name))


def attachment_from_path(path: str | Path, *, media_type: str | None = None) -> Attachment:
    """An attachment of the file at ``path`` (named after it); its type from its bytes."""
    file = Path(path)
    size = file.stat().st_size
    if size > MAX_ATTACHMENT_BYTES:  # before reading it whole
        raise AttachmentError(
            f"{file} has {size} bytes, over the {MAX_ATTACHMENT_BYTES}-byte attachment limit"
        )
    return attachment_from_bytes(file.read_bytes(), media_type=media_type, name=file.name)


def attachment_from_url(
    url: str, *, media_type: str | None = None, name: str | None = None
) -> Attachment:
    """An attachment the provider fetches from ``url`` (https only); the type defaults to
    what the URL's extension says."""
    kind = media_type if media_type is not None else mimetypes.guess_type(url)[0]
    if kind is None:
        raise AttachmentError(f"give media_type= for {url!r}: its extension names no type")
    return checked(Attachment(media_type=kind, url=url, name=name))


def store_attachments(
    put_blob: Callable[[bytes], str], attachments: Sequence[Attachment]
) -> tuple[AttachmentRef, ...]:
    """Check every attachment, then put each one's bytes as a blob; the refs to commit. All
    are checked before the first put, so a bad one writes nothing. Call outside any
    transaction (blobs are; an orphan blob of a commit that never happened is harmless)."""
    for attachment in attachments:
        checked(attachment)
    refs = []
    for attachment in attachments:
        if attachment.data is None:
            refs.append(
                AttachmentRef(
                    media_type=attachment.media_type, url=attachment.url, name=attachment.name
                )
            )
            continue
        refs.append(
            AttachmentRef(
                media_type=attachment.media_type,
                digest=put_blob(attachment.data),
                size=len(attachment.data),
                name=attachment.name,
            )
        )
    return tuple(refs)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returns to give the model images or documents with its text: the model
    reads ``text`` as the call's result and ``attachments`` beside it. Each is checked and
    its blob put before the result is committed; a bad one fails the call (the model reads
    the AttachmentError)."""

    text: str
    attachments: Sequence[Attachment] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredAttachment(Attachment):
    """An attachment read from the records whose bytes are a blob not loaded yet."""

    digest: str
    size: int = 0


def from_ref(ref: AttachmentRef) -> Attachment:
    """What a record's ref becomes in a ChatMessage before its blob is loaded."""
    if ref.digest is None:
        return Attachment(media_type=ref.media_type, url=ref.url, name=ref.name)
    return StoredAttachment(
        media_type=ref.media_type, name=ref.name, digest=ref.digest, size=ref.size
    )


class AttachmentLoader:
    """Loads the blobs of a request's stored attachments, each digest once (one per turn)."""

    def __init__(self, get_blob: Callable[[str], bytes | None]) -> None:
        self._get_blob = get_blob
        self._loaded: dict[str, bytes] = {}

    @staticmethod
    def needed(request: ModelRequest) -> bool:
        """Whether ``request`` has a blob still to load (no I/O: decides a thread crossing)."""
        return any(isinstance(a, StoredAttachment) for m in request.messages for a in m.attachments)

    def load(self, request: ModelRequest) -> ModelRequest:
        """``request`` with every stored attachment's bytes; raises AttachmentError for a
        blob the store does not have."""
        return replace(request, messages=[self._message(m) for m in request.messages])

    def _message(self, message: ChatMessage) -> ChatMessage:
        if not any(isinstance(a, StoredAttachment) for a in message.attachments):
            return message
        return replace(message, attachments=tuple(self._one(a) for a in message.attachments))

    def _one(self, attachment: Attachment) -> Attachment:
        if not isinstance(attachment, StoredAttachment):
            return attachment
        data = self._loaded.get(attachment.digest)
        if data is None:
            data = self._get_blob(attachment.digest)
            if data is None:
                raise AttachmentError(
                    f"the blob {attachment.digest} of an attachment ({attachment.media_type}) "
                    "is not in the store: the turn cannot send it (was the store's blob "
                    "data removed, or the session copied without its blobs?)"
                )
            self._loaded[attachment.digest] = data
        return Attachment(media_type=attachment.media_type, data=data, name=attachment.name)
