"""Pieces both provider formats share: tool-argument normalisation, call ids, JSON access.

Pure functions over plain data; no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from fxdurable.core.records import ToolCallRequest

__all__ = [
    "CallIds",
    "as_dict",
    "as_int",
    "as_str",
    "finish_calls",
    "normalize_arguments",
    "short_id",
]


def normalize_arguments(raw: str) -> str:
    """Tool arguments as compact JSON, whatever whitespace the model wrapped them in.

    Empty arguments are ``"{}"``; a JSON string that itself holds a JSON object (arguments
    encoded twice, which some models do) is unwrapped; text that is not JSON is returned
    unchanged, so the runtime can hand the model a tool error it can read and correct.
    """
    if not raw.strip():
        return "{}"
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, str):
        try:
            inner: Any = json.loads(value)
        except ValueError:
            inner = None
        if isinstance(inner, dict):
            value = inner
    return json.dumps(value, separators=(",", ":"))


def finish_calls(calls: Iterable[tuple[str | None, str, str]]) -> tuple[ToolCallRequest, ...]:
    """Tool calls from accumulated ``(provider id, name, raw arguments)``, in order.

    Provider ids are kept as given but never relied on: an id repeated within one response is
    dropped from the later call, so the runtime names that call itself.
    """
    seen: set[str] = set()
    out: list[ToolCallRequest] = []
    for provider_id, name, raw in calls:
        if provider_id is not None and (not provider_id or provider_id in seen):
            provider_id = None
        if provider_id is not None:
            seen.add(provider_id)
        out.append(
            ToolCallRequest(name=name, arguments=normalize_arguments(raw), provider_id=provider_id)
        )
    return tuple(out)


class CallIds:
    """The ids a request shows a provider for tool calls and their results.

    Recorded ids pass through ``fix`` (a provider's format rules), deterministically, so a call
    and its result still match. A call recorded without an id gets a positional one, and a
    result without an id answers the oldest call still unanswered.
    """

    def __init__(self, fix: Callable[[str], str]) -> None:
        self._fix = fix
        self._unanswered: deque[str] = deque()
        self._made = 0

    def for_call(self, recorded: str | None) -> str:
        if recorded:
            wire = self._fix(recorded)
        else:
            self._made += 1
            wire = f"fxd_call_{self._made}"
        self._unanswered.append(wire)
        return wire

    def for_result(self, recorded: str | None) -> str:
        if recorded:
            wire = self._fix(recorded)
            if wire in self._unanswered:
                self._unanswered.remove(wire)
            return wire
        if self._unanswered:
            return self._unanswered.popleft()
        self._made += 1
        return f"fxd_call_{self._made}"


def short_id(recorded: str, limit: int) -> str:
    """``recorded`` if it fits ``limit`` characters, else a stable digest of it."""
    if len(recorded) <= limit:
        return recorded
    return "call_" + hashlib.sha256(recorded.encode()).hexdigest()[: max(8, limit - 5)]


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    return value if isinstance(value, int) else None
