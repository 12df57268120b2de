"""``ctx.state``: a tool call's view of its session's persisted state, and its buffered writes.

A call reads the state as it was committed when the call started, plus its own writes. Its
writes are buffered here and committed by the journal atomically with the call's result
(``finish_tool``), and only with a ``completed`` one: a call that raises, times out, is
cancelled, is settled ``outcome_unknown``, or dies with its process before its result was
committed never wrote. A durable tool's writes made before a ``ctx.step`` returns commit with
that step's record (the step's value and its writes are one step); when a re-execution after a
crash replays that step from its record, the writes made before it in this run are dropped,
since the recorded step already committed them (and the state this run started from includes
them).

Values are validated and normalised at the write (:func:`canonical_value`): a value that is
not JSON raises :class:`~fxdurable.errors.StateError` there, naming the key and not the value,
and a read returns what a later run would read (a tuple comes back a list). Keys are strings.
Once the call's writes were handed to the journal the view is sealed: a write from a thread
that outlived its call (a sync tool past its timeout) raises instead of vanishing silently.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, MutableMapping
from typing import Any

from fxdurable.core.codec import JsonObject, JsonValue
from fxdurable.core.session_state import StateWrites, canonical_value, check_key
from fxdurable.errors import StateError

__all__ = ["ToolState"]

_MISSING: Any = object()


class ToolState(MutableMapping[str, Any]):
    """The mapping a tool sees as ``ctx.state``: ``get``, ``[key]``, ``in``, ``keys()``,
    iteration and ``len`` read; ``[key] = value``, ``set``, ``update``, ``del``, ``delete``
    and ``pop`` write (buffered until the call's commit)."""

    def __init__(self, committed: JsonObject | None = None, *, tool: str = "tool") -> None:
        self._committed: dict[str, JsonValue] = dict(committed or {})
        self._set: dict[str, JsonValue] = {}
        self._deleted: set[str] = set()
        self._tool = tool
        self._sealed = False
        # A sync tool writes from its own thread, a durable tool's commit reads on the loop.
        self._lock = threading.Lock()

    # -- reads ---------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        with self._lock:
            if key in self._set:
                value = self._set[key]
            elif key in self._deleted or key not in self._committed:
                raise KeyError(key)
            else:
                value = self._committed[key]
        # A copy: mutating what was read must not change the state behind the buffer's back.
        return copy.deepcopy(value)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def _keys(self) -> list[str]:
        with self._lock:
            kept = [k for k in self._committed if k not in self._deleted and k not in self._set]
            return sorted([*kept, *self._set])

    # -- writes --------------------------------------------------------------------------

    def __setitem__(self, key: str, value: Any) -> None:
        key = check_key(key)
        stored = canonical_value(key, value)
        with self._lock:
            self._writable()
            self._set[key] = stored
            self._deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        key = check_key(key)
        with self._lock:
            self._writable()
            present = key in self._set or (key in self._committed and key not in self._deleted)
            if not present:
                raise KeyError(key)
            self._set.pop(key, None)
            if key in self._committed:
                self._deleted.add(key)

    def set(self, key: str, value: Any) -> None:
        """``ctx.state[key] = value``."""
        self[key] = value

    def delete(self, key: str) -> None:
        """Remove ``key`` if present (no error if absent)."""
        if key in self:
            del self[key]
        else:
            check_key(key)

    # -- the runtime's side ----------------------------------------------------------------

    def pending(self) -> StateWrites:
        """The writes not committed yet, as the journal takes them."""
        with self._lock:
            return StateWrites(
                set=dict(self._set), deleted=tuple(sorted(self._deleted - set(self._set)))
            )

    def committed(self, writes: StateWrites) -> None:
        """``writes`` (from :meth:`pending`) were committed with a durable step: they are now
        part of the state this call started from, and no longer pending."""
        with self._lock:
            self._apply(writes)

    def drop_pending(self) -> None:
        """Forget the writes not committed yet (a replayed step committed them in its run)."""
        with self._lock:
            self._set.clear()
            self._deleted.clear()

    def seal(self) -> StateWrites:
        """The call is over: return its uncommitted writes; every later write raises."""
        with self._lock:
            self._sealed = True
        return self.pending()

    def _apply(self, writes: StateWrites) -> None:
        self._committed.update(writes.set)
        for key in writes.deleted:
            self._committed.pop(key, None)
        for key in writes.set:
            if self._set.get(key, _MISSING) == writes.set[key]:
                del self._set[key]
        self._deleted.difference_update(writes.deleted)

    def _writable(self) -> None:
        if self._sealed:
            raise StateError(
                f"{self._tool}: ctx.state was written after the call finished; a write "
                "belongs to a running call (it commits with the call's result)"
            )

    def __repr__(self) -> str:
        # Keys only: values may be secrets, and a repr ends up in logs.
        return f"<ctx.state of {self._tool}: keys {self._keys()}>"
