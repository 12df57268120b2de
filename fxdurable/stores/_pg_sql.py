"""The Postgres store's SQL, generated once at import from the kinds (core/kinds.py), as the
SQLite store's is: one table per kind, key and index columns beside the record's JSON text
(``data``, the same bytes every store writes: core/recordcodec.py), and a numbered,
forward-only list of migrations.

``data`` is ``TEXT``, not ``JSONB``: the store never queries inside a record (every index is a
column), and TEXT keeps the encoder's bytes as written, where JSONB would re-order keys and
cost a parse on every write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fxdurable.core.kinds import KINDS, Index, Kind

__all__ = ["BY_KIND", "MIGRATIONS", "PgTable"]

MIGRATIONS: tuple[str, ...] = (
    # 1: the records. ``ord`` (an identity column) is insertion order for the index that has
    # no order of its own (a session's tool tasks), as SQLite's rowid is.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY, status TEXT NOT NULL, version BIGINT NOT NULL, data TEXT NOT NULL
    );
    CREATE INDEX sessions_active ON sessions(id) WHERE status IN ('active');
    CREATE TABLE submissions (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL, seq BIGINT NOT NULL,
        request_id TEXT NOT NULL UNIQUE, status TEXT NOT NULL, version BIGINT NOT NULL,
        data TEXT NOT NULL, UNIQUE (session_id, seq)
    );
    CREATE INDEX submissions_unsettled ON submissions(session_id, seq)
        WHERE status IN ('queued', 'running');
    CREATE TABLE attempts (
        submission_id TEXT NOT NULL, number BIGINT NOT NULL, version BIGINT NOT NULL,
        data TEXT NOT NULL, PRIMARY KEY (submission_id, number)
    );
    CREATE TABLE turns (id TEXT PRIMARY KEY, version BIGINT NOT NULL, data TEXT NOT NULL);
    CREATE TABLE model_calls (
        turn_id TEXT NOT NULL, round BIGINT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (turn_id, round)
    );
    CREATE TABLE tool_tasks (
        id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
        round BIGINT NOT NULL, idx BIGINT NOT NULL, version BIGINT NOT NULL,
        data TEXT NOT NULL, ord BIGINT GENERATED ALWAYS AS IDENTITY,
        UNIQUE (turn_id, round, idx)
    );
    CREATE INDEX tool_tasks_session ON tool_tasks(session_id, ord);
    CREATE TABLE messages (
        session_id TEXT NOT NULL, seq BIGINT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE TABLE events (
        session_id TEXT NOT NULL, seq BIGINT NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    """,
    # 2: content-addressed blobs (store.put_blob), a table of their own.
    """
    CREATE TABLE blobs (digest TEXT PRIMARY KEY, data BYTEA NOT NULL);
    """,
)

_TABLES = {
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
class PgTable:
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


def _range_sql(table: str, index: Index, *, after: bool, limit: bool) -> str:
    terms = [f"{col(f)} = %s" for f in index.match]
    terms += [
        f"{col(f)} IN ({', '.join(repr(v) for v in sorted(values))})"
        for f, values in index.where.items()
    ]
    if after:
        terms.append(f"{col(index.order[-1])} > %s")
    sql = f"SELECT data FROM {table}"
    if terms:
        sql += " WHERE " + " AND ".join(terms)
    # No order: insertion order, the identity column's where a table has one (tool tasks).
    default = "ord" if table == "tool_tasks" else ", ".join(col(f) for f in index.match)
    sql += " ORDER BY " + (", ".join(col(f) for f in index.order) or default)
    return sql + (" LIMIT %s" if limit else "")


def _table(kind: Kind[Any]) -> PgTable:
    name = _TABLES[kind.name]
    where_key = " AND ".join(f"{col(f)} = %s" for f in kind.key)
    extra = tuple(c for c in kind.columns if c not in kind.key)
    inserted = (*kind.key, *extra, *(("version",) if kind.versioned else ()))
    cols = [*(col(f) for f in inserted), "data"]
    # ON CONFLICT DO NOTHING: an existing key is a rowcount of 0, not an error that would
    # abort the whole transaction (the body may catch the ConflictError and go on).
    insert = (
        f"INSERT INTO {name} ({', '.join(cols)}) VALUES ({', '.join('%s' for _ in cols)}) "
        "ON CONFLICT DO NOTHING"
    )
    update = None
    updated: tuple[str, ...] = ()
    if kind.versioned:
        updated = (*(c for c in extra if c not in kind.fixed), "version")
        sets = ", ".join(f"{col(f)} = %s" for f in (*updated, "data"))
        update = f"UPDATE {name} SET {sets} WHERE {where_key} AND version = %s"
    ranges = {
        (index_name, after, limit): _range_sql(name, index, after=after, limit=limit)
        for index_name, index in kind.indexes.items()
        for after in (False, True)
        for limit in (False, True)
        if not after or index.order
    }
    return PgTable(
        kind=kind,
        name=name,
        get=f"SELECT data FROM {name} WHERE {where_key}",
        delete=f"DELETE FROM {name} WHERE {where_key}",
        insert=insert,
        insert_fields=inserted,
        update=update,
        update_fields=updated,
        ranges=ranges,
    )


BY_KIND = {kind.name: _table(kind) for kind in KINDS}
