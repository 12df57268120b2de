"""Pieces both provider formats share: tool arguments, inferred stops, call ids, JSON access.

Pure functions over plain data; no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fxdurable.core.records import ToolCallRequest
from fxdurable.errors import ModelRetryableError

__all__ = [
    "CallIds",
    "as_dict",
    "as_int",
    "as_str",
    "canonical",
    "decode_arguments",
    "finish_calls",
    "infer_stop",
    "is_complete_arguments",
    "short_id",
]


def decode_arguments(raw: str) -> Any:
    """The value of a tool call's argument text, whatever whitespace the model wrapped it in.

    Empty arguments are ``{}``; a JSON string that itself holds a JSON object (arguments
    encoded twice, which some models do) is unwrapped. Raises ``ValueError`` for text that is
    not JSON. The text itself is never rewritten: it is recorded and sent back as the model
    produced it (a re-serialised prompt prefix defeats provider-side prompt caching).
    """
    if not raw.strip():
        return {}
    value: Any = json.loads(raw)
    if isinstance(value, str):
        try:
            inner: Any = json.loads(value)
        except ValueError:
            return value
        if isinstance(inner, dict):
            return inner
    return value


def is_complete_arguments(raw: str) -> bool:
    """The argument text is a whole JSON object: the model closed it. A stream cut by the
    output limit leaves it open (or, cut right after the call began, empty)."""
    if not raw.strip():
        return False
    try:
        return isinstance(decode_arguments(raw), dict)
    except ValueError:
        return False


def infer_stop(
    provider: str, text: str, calls: Sequence[tuple[str, str]], *, tool_stop: str, text_stop: str
) -> str:
    """The stop reason of a response whose stream ended without one (``[DONE]`` or a clean
    close right after the content, as some compatible servers do): ``tool_stop`` when it asked
    for tools, else ``text_stop``. ``calls`` are ``(name, raw arguments)``. Raises
    :class:`ModelRetryableError` when the content does not look whole (nothing at all, or a
    tool call without a name or with unfinished arguments): that stream was cut."""
    if not text and not calls:
        raise ModelRetryableError(
            f"{provider} ended the stream without a finish reason and without any content"
        )
    for name, raw in calls:
        if not name or (raw.strip() and not is_complete_arguments(raw)):
            raise ModelRetryableError(
                f"{provider} ended the stream without a finish reason in the middle of a tool "
                f"call ({name or 'unnamed'})"
            )
    return tool_stop if calls else text_stop


def finish_calls(calls: Iterable[tuple[str | None, str, str]]) -> tuple[ToolCallRequest, ...]:
    """Tool calls from accumulated ``(provider id, name, raw arguments)``, in order; the
    arguments are kept byte for byte.

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
        out.append(ToolCallRequest(name=name, arguments=raw, provider_id=provider_id))
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


def canonical(part: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a recorded provider part with every object's keys sorted. The journal
    writes parts with sorted keys, so the part a process decodes after a crash and the one
    fresh from the stream are the same bytes on the wire: the cached prefix survives."""
    copied: dict[str, Any] = json.loads(json.dumps(part, sort_keys=True))
    return copied
