"""A provider's prompt cache as the scripted server plays it (``Quirks(prompt_cache=True)``).

The server remembers, for every request it answered, the bytes of the request up to the end
of each of its messages (the conversation is the body's last key, see ``prompt_prefix``).
A later request whose bytes start with one of those prefixes is told that share of its input
was read from the cache (``cache_read_input_tokens`` / ``cached_tokens``), in proportion to
the bytes it repeats. ``cache_control`` markers do not count (Anthropic keys its cache on the
content, not on where a breakpoint sits), so a breakpoint that moves to the newest message
keeps the older prefix readable. Anthropic caches nothing in a request without breakpoints,
and reports the input it did not read as written to the cache when the request has some;
OpenAI caches every prefix and never reports writes. The cache lives as long as the server:
a server started again (a crashed process's) starts empty.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from fxdurable.core.records import Usage
from fxdurable.testing.prompt_prefix import conversation_spans

__all__ = ["PromptCacheSim"]


class PromptCacheSim:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[bytes] = set()

    def usage(self, wire: str, body: dict[str, Any], usage: Usage) -> Usage:
        """``usage`` with the cache's share of the input, and this request's prefixes kept."""
        marked = _has_breakpoints(body)
        raw = json.dumps(_unmarked(body)).encode()
        cuts = [end for _, end in conversation_spans(raw)]  # the bytes up to each message
        digests = [hashlib.sha256(raw[:cut]).digest() for cut in cuts]
        with self._lock:
            hit = max((c for c, d in zip(cuts, digests, strict=True) if d in self._seen), default=0)
            if wire != "anthropic" or marked:
                self._seen.update(digests)
        if wire == "anthropic" and not marked:
            return usage
        read = usage.input_tokens * hit // len(raw)
        written = usage.input_tokens - read if wire == "anthropic" else 0
        return Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=read,
            cache_creation_tokens=written,
            reasoning_tokens=usage.reasoning_tokens,
        )


def _has_breakpoints(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_has_breakpoints(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_breakpoints(v) for v in value)
    return False


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value
