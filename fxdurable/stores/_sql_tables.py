"""What the SQL stores (SQLite, PostgreSQL) share: each kind's statements, generated once at
import from its declaration (core/kinds.py), and the four transaction primitives over them.

One table per kind, key and index columns beside the record's JSON text (``data``, the same
bytes every store writes: core/recordcodec.py). The dialects differ in three places only,
which each store passes in: the parameter placeholder, what an insert over an existing key
does (SQLite raises ``IntegrityError``; Postgres says ``ON CONFLICT DO NOTHING``, since an
error would abort its whole transaction), and the order of an index that has none of its own
(insertion order: SQLite's ``rowid``, a Postgres identity column).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from fxdurable.core.kinds import KINDS, Index, Key, Kind, kind_of
from fxdurable.core.recordcodec import decode, encode
from fxdurable.core.store import DerivedTx
from fxdurable.errors import ConflictError

__all__ = ["SqlTable", "SqlTx", "col", "sql_tables"]

R = TypeVar("R")

TABLE_NAMES = {
    "session": "sessions",
    "submission": "submissions",
    "attempt": "attempts",
    "turn": "turns",
    "model_call": "model_calls",
    "tool_task": "tool_tasks",
    "message": "messages",
    "event": "events",
}
_COLUMN = {"index": "idx"}  # field -> column, where the two differ


def col(field: str) -> str:
    return _COLUMN.get(field, field)


@dataclass(frozen=True, slots=True)
class SqlTable:
    """The SQL of one kind."""

    kind: Kind[Any]
    name: str
    get: str
    delete: str
    insert: str
    insert_fields: tuple[str, ...]
    update: str | None  # None: an append-only kind
    update_fields: tuple[str, ...]
    ranges: dict[tuple[str, bool, bool], str]  # (index, after given, limit given) -> SELECT


def _range_sql(
    table: str,
    index: Index,
    p: str,
    insertion_order: str,
    derived: Mapping[str, str],
    *,
    after: bool,
    limit: bool,
) -> str:
    def term(field: str) -> str:
        return derived.get(field, col(field))

    terms = [f"{term(f)} = {p}" for f in index.match]
    terms += [
        f"{term(f)} IN ({', '.join(repr(v) for v in sorted(values))})"
        for f, values in index.where.items()
    ]
    terms += [f"{term(f)} IS NOT NULL" for f in index.present]
    if after:
        terms.append(f"{term(index.order[-1])} > {p}")
    sql = f"SELECT data FROM {table}"
    if terms:
        sql += " WHERE " + " AND ".join(terms)
    sql += " ORDER BY " + (", ".join(term(f) for f in index.order) or insertion_order)
    return sql + (f" LIMIT {p}" if limit else "")


def _table(
    kind: Kind[Any],
    p: str,
    insert_suffix: str,
    insertion_order: Callable[[str, Index], str],
    derived: Mapping[str, str],
) -> SqlTable:
    name = TABLE_NAMES[kind.name]
    where_key = " AND ".join(f"{col(f)} = {p}" for f in kind.key)
    extra = tuple(c for c in kind.columns if c not in kind.key and c not in derived)
    inserted = (*kind.key, *extra, *(("version",) if kind.versioned else ()))
    cols = [*(col(f) for f in inserted), "data"]
    insert = f"INSERT INTO {name} ({', '.join(cols)}) VALUES ({', '.join(p for _ in cols)})"
    update = None
    updated: tuple[str, ...] = ()
    if kind.versioned:
        updated = (*(c for c in extra if c not in kind.fixed), "version")
        sets = ", ".join(f"{col(f)} = {p}" for f in (*updated, "data"))
        update = f"UPDATE {name} SET {sets} WHERE {where_key} AND version = {p}"
    ranges = {
        (index_name, after, limit): _range_sql(
            name, index, p, insertion_order(name, index), derived, after=after, limit=limit
        )
        for index_name, index in kind.indexes.items()
        for after in (False, True)
        for limit in (False, True)
        if not after or index.order
    }
    return SqlTable(
        kind=kind,
        name=name,
        get=f"SELECT data FROM {name} WHERE {where_key}",
        delete=f"DELETE FROM {name} WHERE {where_key}",
        insert=insert + insert_suffix,
        insert_fields=inserted,
        update=update,
        update_fields=updated,
        ranges=ranges,
    )


def sql_tables(
    placeholder: str,
    *,
    insert_suffix: str = "",
    insertion_order: Callable[[str, Index], str],
    derived: Mapping[str, str] | None = None,
) -> dict[str, SqlTable]:
    """Every kind's statements in one dialect, by kind name. ``insertion_order(table,
    index)``: the ORDER BY of an index with no order of its own. ``derived``: columns this
    dialect does not store but reads from ``data`` by an SQL expression (field -> the
    expression), so adding one needs no schema version (SQLite: stores/sqlite.py)."""
    given = derived or {}
    return {k.name: _table(k, placeholder, insert_suffix, insertion_order, given) for k in KINDS}


def _value(record: object, field: str) -> object:
    value = getattr(record, field)
    return value.value if isinstance(value, enum.Enum) else value


def key_text(table: SqlTable, record: object) -> str:
    return str({col(f): getattr(record, f) for f in table.kind.key})


class _Connection(Protocol):
    def execute(self, sql: str, args: Sequence[object] = ..., /) -> Any: ...


class SqlTx(DerivedTx):
    """The four primitives on one connection, inside the caller's transaction: each one
    statement of :attr:`tables`. A store sets :attr:`tables` and fills :meth:`_insert_row`."""

    __slots__ = ("_conn",)
    tables: dict[str, SqlTable]

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn

    def _insert_row(
        self, table: SqlTable, args: tuple[object, ...], conflict: Callable[[], str]
    ) -> None:
        """Insert one row; when its key exists already nothing is written and the
        transaction meets ``ConflictError(conflict())``."""
        raise NotImplementedError

    def _expect_one(self, cursor: Any, conflict: Callable[[], str]) -> None:
        """``cursor`` ran a write that must touch exactly one row, else the transaction
        meets ``ConflictError(conflict())``: here at once; a store that pipelines its
        statements overrides this to check when its results arrive, before COMMIT."""
        if cursor.rowcount != 1:
            raise ConflictError(conflict())

    def get(self, kind: Kind[R], key: Key) -> R | None:
        row = self._conn.execute(self.tables[kind.name].get, key).fetchone()
        return None if row is None else decode(kind.cls, row[0])

    def range(
        self,
        kind: Kind[R],
        index: str,
        value: Key = (),
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> Sequence[R]:
        table = self.tables[kind.name]
        sql = table.ranges.get((index, bool(after), limit is not None))
        if sql is None:
            kind.index(index)  # an unknown index: its error
            raise ValueError(f"{kind.name} index {index!r} has no order to read after")
        args: tuple[object, ...] = value
        if after:
            args += (after,)
        if limit is not None:
            args += (limit,)
        return [decode(kind.cls, row[0]) for row in self._conn.execute(sql, args)]

    def put(self, record: object, *, expected_version: int | None) -> None:
        table = self.tables[kind_of(record).name]
        if table.update is None:
            raise TypeError(f"{table.kind.name} records are append-only: use append()")
        if expected_version is None:
            self._insert(table, record)
            return
        args = (
            *(_value(record, f) for f in table.update_fields),
            encode(record),
            *table.kind.key_of(record),
            expected_version,
        )
        self._expect_one(
            self._conn.execute(table.update, args),
            lambda: (
                f"{table.name} record {key_text(table, record)} changed since it was read "
                f"(expected version {expected_version})"
            ),
        )

    def append(self, record: object) -> None:
        table = self.tables[kind_of(record).name]
        if table.update is not None:
            raise TypeError(f"{table.kind.name} records are versioned: use put()")
        self._insert(table, record)

    def delete(self, kind: Kind[R], key: Key) -> None:
        # Unconditional and idempotent (core/store.py): a resumed erase deletes again.
        self._conn.execute(self.tables[kind.name].delete, key)

    def _insert(self, table: SqlTable, record: object) -> None:
        args = (*(_value(record, f) for f in table.insert_fields), encode(record))
        self._insert_row(
            table, args, lambda: f"{table.name} record {key_text(table, record)} already exists"
        )
