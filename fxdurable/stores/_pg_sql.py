"""The Postgres store's SQL, generated once at import from the kinds (core/kinds.py), as the
SQLite store's is (stores/_sql_tables.py), and a numbered, forward-only list of migrations.

``data`` is ``TEXT``, not ``JSONB``: the store never queries inside a record (every index is a
column), and TEXT keeps the encoder's bytes as written, where JSONB would re-order keys and
cost a parse on every write.
"""

from __future__ import annotations

from fxdurable.core.kinds import Index
from fxdurable.stores._sql_tables import col, sql_tables

__all__ = ["BY_KIND", "MIGRATIONS"]

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
    # 3: a blob's bytes may be an S3 object instead (?bucket=, stores/_pg_blobs.py): then
    # ``data`` is NULL and ``s3_written`` says when the object was last written. Each step is
    # cheap on a large table: a nullable column without a default, a dropped NOT NULL, and a
    # CHECK that every existing row meets by construction (NOT VALID: no scan under the lock).
    """
    ALTER TABLE blobs ADD COLUMN s3_written TIMESTAMPTZ;
    ALTER TABLE blobs ALTER COLUMN data DROP NOT NULL;
    ALTER TABLE blobs ADD CONSTRAINT blobs_bytes_or_object
        CHECK ((data IS NULL) <> (s3_written IS NULL)) NOT VALID;
    """,
    # 4: when an idle session falls due for the retention sweep (core/retention.py): a
    # nullable column without a default (no rewrite), NULL on every existing session, which
    # has no retention; the partial index holds only the sessions that have one.
    """
    ALTER TABLE sessions ADD COLUMN retain_until DOUBLE PRECISION;
    CREATE INDEX sessions_retention ON sessions(retain_until, id)
        WHERE retain_until IS NOT NULL;
    """,
)


def _insertion_order(table: str, index: Index) -> str:
    # No order of its own: insertion order, the identity column's where a table has one
    # (tool tasks); elsewhere the match columns (such an index has one row per match).
    return "ord" if table == "tool_tasks" else ", ".join(col(f) for f in index.match)


# ON CONFLICT DO NOTHING: an existing key is a rowcount of 0, not an error that would abort
# the whole transaction (the body may catch the ConflictError and go on).
BY_KIND = sql_tables(
    "%s", insert_suffix=" ON CONFLICT DO NOTHING", insertion_order=_insertion_order
)
