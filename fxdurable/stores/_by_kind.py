"""The four primitives for a backend whose layout differs by kind (Redis keys, DynamoDB items).

SQLite builds one statement per kind and index from the declarations; a key-value layout
answers each (kind, index) with its own keys (a sorted set here, a pointer item there), so its
transaction supplies one method per declaration and :class:`ByKindTx` routes the primitives to
them by name:

- ``get(kind, key)`` -> ``_get_<kind>(*key)``
- ``range(kind, index, value, after=, limit=)`` -> ``_range_<kind>_<index>(*value)``, and
  ``after``/``limit`` applied to what it returns, unless the method is one of ``CURSORED``
  (messages, events and the retention index: their queries take the cursor and the page
  themselves)
- ``put(record, expected_version=)`` -> ``_put_<kind>(record, expected_version=)``
- ``append(record)`` -> ``_append_<kind>(record)``
- ``delete(kind, key)`` -> ``_delete_<kind>(*key)``

A subclass missing one of them fails when it is defined (``__init_subclass__``), not at the
first record of that kind. The named reads and writes above the primitives are
:class:`~fxdurable.core.store.DerivedTx`'s, shared with every store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

from fxdurable.core.kinds import KINDS, Index, Key, Kind, kind_of
from fxdurable.core.store import DerivedTx

__all__ = ["ByKindTx", "past"]

R = TypeVar("R")


def _expected_methods() -> list[str]:
    names = []
    for kind in KINDS:
        names.append(f"_get_{kind.name}")
        names += [f"_range_{kind.name}_{index}" for index in kind.indexes]
        names.append(f"_put_{kind.name}" if kind.versioned else f"_append_{kind.name}")
        names.append(f"_delete_{kind.name}")
    return names


_EXPECTED = _expected_methods()


def past(index: Index, records: Sequence[R], after: int, limit: int | None) -> Sequence[R]:
    """``records`` (in the index's order) past ``after`` on its last order field, at most
    ``limit``: for a mapping whose query does not take them itself."""
    if after:
        field = index.order[-1]
        records = [r for r in records if getattr(r, field) > after]
    return records if limit is None else records[:limit]


class ByKindTx(DerivedTx):
    """See the module."""

    CURSORED = frozenset(
        {"_range_message_session", "_range_event_session", "_range_session_retention"}
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "_partial", False):
            return
        missing = [name for name in _EXPECTED if not callable(getattr(cls, name, None))]
        if missing:
            raise TypeError(f"{cls.__name__} does not map {', '.join(missing)}")

    def get(self, kind: Kind[R], key: Key) -> R | None:
        return cast("R | None", getattr(self, f"_get_{kind.name}")(*key))

    def range(
        self,
        kind: Kind[R],
        index: str,
        value: Key = (),
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> Sequence[R]:
        declared = kind.index(index)  # an unknown index: its error
        name = f"_range_{kind.name}_{index}"
        method = getattr(self, name)
        if name in self.CURSORED:
            return cast("Sequence[R]", method(*value, after=after, limit=limit))
        found = cast("Sequence[R]", method(*value))
        return past(declared, found, after, limit) if after or limit is not None else found

    def put(self, record: object, *, expected_version: int | None) -> None:
        kind = kind_of(record)
        if not kind.versioned:
            raise TypeError(f"{kind.name} records are append-only: use append()")
        getattr(self, f"_put_{kind.name}")(record, expected_version=expected_version)

    def append(self, record: object) -> None:
        kind = kind_of(record)
        if kind.versioned:
            raise TypeError(f"{kind.name} records are versioned: use put()")
        getattr(self, f"_append_{kind.name}")(record)

    def delete(self, kind: Kind[R], key: Key) -> None:
        getattr(self, f"_delete_{kind.name}")(*key)
