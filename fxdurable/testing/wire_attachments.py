"""Images and documents in the scripted server's requests, read back as the real APIs read
them: each wire's parts become :class:`Attachment`s on the parsed messages (bytes decoded, or
the URL), so a test can check that the bytes arrived. A malformed part (base64 that does not
decode, a media type the API does not take, no source) is a :class:`WireError`, answered with
the provider's 400 as the real API does."""

from __future__ import annotations

import base64
import binascii
import mimetypes
import re
from typing import Any

from fxdurable.core.records import ATTACHMENT_TYPES
from fxdurable.runtime.models.base import Attachment
from fxdurable.testing.wire_common import WireError

__all__ = ["ATTACHMENT_PARTS", "TEXT_PARTS", "content_parts", "read_part"]

# Text parts of a user or tool content list, and the parts that carry an attachment.
TEXT_PARTS = frozenset({"text", "input_text"})
ATTACHMENT_PARTS = frozenset(
    {"image", "document", "image_url", "file", "input_image", "input_file"}
)
_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)


def _decode(data: object, media_type: str, where: str) -> Attachment:
    if media_type not in ATTACHMENT_TYPES:
        raise WireError(f"{where}: media type {media_type!r} is not supported")
    if not isinstance(data, str):
        raise WireError(f"{where}: base64 data must be a string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise WireError(f"{where}: the base64 data is invalid") from e
    return Attachment(media_type=media_type, data=raw)


def _from_url(url: object, where: str, *, media_type: str) -> Attachment:
    if not isinstance(url, str) or not url:
        raise WireError(f"{where}: a url must be a non-empty string")
    found = _DATA_URL.fullmatch(url)
    if found is not None:
        return _decode(found["data"], found["type"], where)
    if not url.startswith(("https://", "http://")):
        raise WireError(f"{where}: {url[:40]!r} is neither a data URL nor an http(s) URL")
    # A URL's type is what its name says (the provider learns it when fetching it).
    guessed = mimetypes.guess_type(url.split("?", 1)[0])[0]
    return Attachment(media_type=guessed or media_type, url=url)


def read_part(part: dict[str, Any], where: str) -> Attachment:
    """The attachment one part carries (its type is in :data:`ATTACHMENT_PARTS`)."""
    kind = part["type"]
    name = part.get("filename") or part.get("title")
    name = name if isinstance(name, str) else None
    if kind in ("image", "document"):  # Anthropic: a base64 or url source
        source = part.get("source")
        if not isinstance(source, dict):
            raise WireError(f"{where}.source must be an object")
        fallback = "application/pdf" if kind == "document" else "image/*"
        if source.get("type") == "base64":
            got = _decode(source.get("data"), str(source.get("media_type")), f"{where}.source")
        elif source.get("type") == "url":
            got = _from_url(source.get("url"), f"{where}.source", media_type=fallback)
        else:
            raise WireError(f"{where}.source.type must be 'base64' or 'url'")
    elif kind == "image_url":  # Chat Completions
        holder = part.get("image_url")
        url = holder.get("url") if isinstance(holder, dict) else None
        got = _from_url(url, f"{where}.image_url", media_type="image/*")
    elif kind == "file":  # Chat Completions: bytes only
        holder = part.get("file")
        if not isinstance(holder, dict):
            raise WireError(f"{where}.file must be an object")
        name = holder.get("filename") if isinstance(holder.get("filename"), str) else None
        got = _from_url(holder.get("file_data"), f"{where}.file", media_type="application/pdf")
    elif kind == "input_image":  # Responses
        got = _from_url(part.get("image_url"), where, media_type="image/*")
    else:  # input_file (Responses): file_data or file_url
        given = part.get("file_data") or part.get("file_url")
        got = _from_url(given, where, media_type="application/pdf")
    return Attachment(media_type=got.media_type, data=got.data, url=got.url, name=name)


def content_parts(content: object, where: str) -> tuple[str, tuple[Attachment, ...]]:
    """The text and the attachments of a user or tool ``content``: a string, null, or a list
    of parts (the text parts joined, other parts skipped)."""
    if content is None:
        return "", ()
    if isinstance(content, str):
        return content, ()
    if not isinstance(content, list):
        raise WireError(f"{where}: content must be a string or a list of parts")
    texts: list[str] = []
    attachments: list[Attachment] = []
    for j, part in enumerate(content):
        here = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise WireError(f"{here}: content parts must be objects")
        kind = part.get("type")
        if kind in TEXT_PARTS:
            text = part.get("text")
            if not isinstance(text, str):
                raise WireError(f"{here}.text must be a string")
            texts.append(text)
        elif kind in ATTACHMENT_PARTS:
            attachments.append(read_part(part, here))
    return "".join(texts), tuple(attachments)
