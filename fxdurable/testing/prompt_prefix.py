"""Where a provider request body's conversation starts and where each of its messages does,
in bytes: what a cacheable-prefix check compares (docs/caching.md).

The providers build bodies with the conversation (``messages``, or the Responses API's
``input``) as the last key, so everything before the latest message (model settings, tools,
the system prompt, the earlier messages) is one run of bytes at the start of the body. A
prompt cache can serve that run to the next request only if the next request starts with the
very same bytes.
"""

from __future__ import annotations

import json

__all__ = [
    "CONVERSATION_KEYS",
    "conversation_offsets",
    "conversation_spans",
    "prefix_before_latest",
]

CONVERSATION_KEYS = ("messages", "input")
_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


def conversation_offsets(raw: bytes) -> list[int]:
    """The byte offsets in ``raw`` (a JSON object) at which each element of its last key's
    array starts, that key being a conversation key; [] when the body has none or its last
    key is not one. Offsets are in bytes of the UTF-8 body, as sent."""
    return [start for start, _ in conversation_spans(raw)]


def conversation_spans(raw: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` byte offsets of each conversation element, as
    :func:`conversation_offsets` finds them."""
    text = raw.decode()
    key, start = _last_member(text)
    if key not in CONVERSATION_KEYS or start is None or text[start] != "[":
        return []
    spans: list[tuple[int, int]] = []
    at = _skip(text, start + 1)
    while text[at] != "]":
        begin = at
        _, at = _DECODER.raw_decode(text, at)
        spans.append((len(text[:begin].encode()), len(text[:at].encode())))
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
    return spans


def prefix_before_latest(raw: bytes) -> bytes:
    """``raw`` up to (not including) its conversation's latest message: the cacheable prefix
    the next step of the turn must repeat byte for byte. The whole body when it has no
    conversation key last."""
    offsets = conversation_offsets(raw)
    return raw[: offsets[-1]] if offsets else raw


def _last_member(text: str) -> tuple[str | None, int | None]:
    """The last key of the top-level object and where its value starts."""
    at = _skip(text, 0)
    if text[at] != "{":
        return None, None
    at = _skip(text, at + 1)
    key: str | None = None
    value_at: int | None = None
    while text[at] != "}":
        key, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        assert text[at] == ":", f"not a JSON object member at {at}"
        value_at = at = _skip(text, at + 1)
        _, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
    return key, value_at


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at
