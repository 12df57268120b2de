"""A session's persisted state (``ctx.state``): string keys, JSON values, committed by steps.

The state lives in the session record (``SessionRecord.state``), which every fenced
transition reads and writes already: a commit costs no extra round trip, and it is serialised
with everything else written to the session by the record's version check. A tool call's
writes are buffered while it runs (:mod:`fxdurable.runtime.state`) and handed to the journal
as :class:`StateWrites` with the transition that completes the call (``finish_tool``) or a
durable step (``record_step``). The journal merges only the keys the call wrote into the state
read in that transaction (read-modify-write under the session's version), so a concurrent
commit of another call never loses a key; per key, the last commit wins. Each merge is
announced by a ``state.changed`` event in the same transaction, which makes the state a fold
of its events (:func:`fold_state`): ``fxdurable check`` verifies it, and a fork takes the state
as it was at its point by folding the source's events up to it.

Values are stored as their canonical JSON, decoded: a tuple comes back a list, every dict key
a string. The whole state is bounded (:data:`MAX_STATE_BYTES` of canonical JSON), because the
session record is rewritten by every step of every turn: a bigger state would make every step
pay for it (and a DynamoDB item holds 400 KB).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fxdurable.core.codec import JsonObject, JsonValue, dumps
from fxdurable.core.events import EventType
from fxdurable.core.records import EventRecord
from fxdurable.errors import StateError, StateTooLargeError

__all__ = [
    "MAX_STATE_BYTES",
    "StateWrites",
    "canonical_value",
    "check_key",
    "fold_state",
    "merged_state",
]

# The session's whole state as canonical JSON (UTF-8 bytes). Every step rewrites the session
# record, so this bounds what the state adds to each step's write.
MAX_STATE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class StateWrites:
    """What one call (or one durable step of it) wrote: the keys it set, with their values
    as stored, and the keys it deleted. A key is in one of the two, never both."""

    set: Mapping[str, JsonValue] = field(default_factory=dict)
    deleted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.set) or bool(self.deleted)


def check_key(key: object) -> str:
    """A state key is a non-empty string; anything else raises :class:`StateError`."""
    if not isinstance(key, str) or not key:
        raise StateError(f"ctx.state keys are non-empty strings, not {type(key).__name__}")
    return key


def canonical_value(key: str, value: object) -> JsonValue:
    """``value`` as the state stores it (through canonical JSON, so a read returns what a
    replay would). Raises :class:`StateError` naming the key, never the value (it may be a
    secret): a value that is not JSON must fail at the write, not at the commit."""
    try:
        text = dumps(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise StateError(
            f"ctx.state[{key!r}]: a {type(value).__name__} is not JSON; state values are "
            "dicts, lists, strings, numbers, booleans or None"
        ) from exc
    stored: JsonValue = json.loads(text)
    return stored


def merged_state(state: JsonObject, writes: StateWrites) -> dict[str, JsonValue]:
    """``state`` with ``writes`` applied; raises :class:`StateTooLargeError` past the bound."""
    merged = dict(state)
    merged.update(writes.set)
    for key in writes.deleted:
        merged.pop(key, None)
    size = len(dumps(merged).encode())
    if size > MAX_STATE_BYTES:
        raise StateTooLargeError(size, MAX_STATE_BYTES, sorted(writes.set))
    return merged


def fold_state(events: Iterable[EventRecord]) -> dict[str, JsonValue]:
    """The state a sequence of a session's events (in order) leaves: every ``state.changed``
    applied in turn. What the session record's ``state`` must equal, and what a fork copies."""
    state: dict[str, JsonValue] = {}
    for event in events:
        if event.type != EventType.STATE_CHANGED:
            continue
        written = event.data.get("set")
        if isinstance(written, Mapping):
            state.update(written)
        deleted = event.data.get("deleted")
        if isinstance(deleted, list | tuple):
            for key in deleted:
                state.pop(str(key), None)
    return state
