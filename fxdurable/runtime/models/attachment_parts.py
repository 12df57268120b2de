"""Images and documents as each wire sends them (docs/providers.md, "Images and documents,
per provider").

A :class:`~fxdurable.runtime.models.base.Attachment` is given as its bytes (sent base64, the
same bytes giving the same text every step, so a request's cacheable prefix stays a prefix)
or as a URL the provider fetches. Each builder makes fresh dicts with keys in a fixed order.

- Anthropic Messages: ``image`` blocks (source ``base64`` with its ``media_type``, or
  ``url``) and ``document`` blocks for PDF, in a prompt and in ``tool_result.content``.
- OpenAI Chat Completions: ``image_url`` parts (a ``data:`` URL or the URL) and ``file``
  parts for PDF (``file_data`` as a data URL, with a ``filename``) in a user message. A tool
  message takes text only, so a round's tool images go in a user message after its tool
  messages (:func:`chat_tool_followup`).
- OpenAI Responses: ``input_image`` and ``input_file`` parts, in a user message and in a
  ``function_call_output``'s ``output`` list.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from fxdurable.runtime.models.base import Attachment, ChatMessage

__all__ = [
    "PDF",
    "anthropic_blocks",
    "chat_parts",
    "chat_tool_followup",
    "data_url",
    "default_filename",
    "responses_parts",
]

PDF = "application/pdf"


def _base64(attachment: Attachment) -> str:
    return base64.b64encode(attachment.data or b"").decode("ascii")


def data_url(attachment: Attachment) -> str:
    """The attachment as a URL: its own, or a ``data:`` URL of its bytes."""
    if attachment.url is not None:
        return attachment.url
    return f"data:{attachment.media_type};base64,{_base64(attachment)}"


def default_filename(attachment: Attachment, index: int) -> str:
    """The name a document is sent with (the OpenAI wires require one for ``file_data``)."""
    return attachment.name or f"document-{index + 1}.pdf"


def anthropic_blocks(attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
    """``image`` / ``document`` blocks, in order."""
    blocks: list[dict[str, Any]] = []
    for attachment in attachments:
        kind = "document" if attachment.media_type == PDF else "image"
        source: dict[str, Any]
        if attachment.url is not None:
            source = {"type": "url", "url": attachment.url}
        else:
            source = {
                "type": "base64",
                "media_type": attachment.media_type,
                "data": _base64(attachment),
            }
        block: dict[str, Any] = {"type": kind, "source": source}
        if kind == "document" and attachment.name:
            block["title"] = attachment.name
        blocks.append(block)
    return blocks


def chat_parts(text: str, attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
    """A Chat Completions user ``content`` list: the text, then ``image_url``/``file`` parts."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for index, attachment in enumerate(attachments):
        if attachment.media_type == PDF:
            file: dict[str, Any] = {"filename": default_filename(attachment, index)}
            # A file part takes bytes (file_data) or an uploaded file's id, never a URL:
            # a document given by URL goes as a link in a text part.
            if attachment.url is None:
                file["file_data"] = data_url(attachment)
                parts.append({"type": "file", "file": file})
            else:
                parts.append({"type": "text", "text": f"Document: {attachment.url}"})
        else:
            parts.append({"type": "image_url", "image_url": {"url": data_url(attachment)}})
    return parts


def chat_tool_followup(results: Sequence[tuple[str, ChatMessage]]) -> dict[str, Any] | None:
    """The user message carrying the attachments of one round's tool results (``results``:
    each sent call id with its result), or None when they carry none."""
    parts: list[dict[str, Any]] = []
    for call_id, result in results:
        if not result.attachments:
            continue
        heading = f"Images returned by {result.tool_name or 'the tool'} (call {call_id}):"
        parts += chat_parts(heading, result.attachments)
    return {"role": "user", "content": parts} if parts else None


def responses_parts(text: str, attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
    """Responses ``input_text`` + ``input_image``/``input_file`` parts, in order."""
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}] if text else []
    for index, attachment in enumerate(attachments):
        if attachment.media_type == PDF:
            part: dict[str, Any] = {"type": "input_file"}
            if attachment.url is not None:
                part["file_url"] = attachment.url
            else:
                part["filename"] = default_filename(attachment, index)
                part["file_data"] = data_url(attachment)
            parts.append(part)
        else:
            parts.append({"type": "input_image", "image_url": data_url(attachment)})
    return parts
