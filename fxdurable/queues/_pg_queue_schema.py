"""The Postgres queue's URL, connections and schema (forward-only numbered migrations).

``postgresql://user@host:port/db?schema=fxdurable`` (``postgres://`` too): every option but
``schema`` and the queue's own (``max_deliveries``) goes to libpq as given. The schema is
created if missing; its tables carry a version row (``fxd_queue_version``) and each numbered
step in :data:`MIGRATIONS` runs once, in order, in one transaction with an advisory lock, so
workers starting together migrate once. A schema newer than the code is refused.

This is the queue's own small connection helper until the Postgres store's shared one
(``fxdurable/stores/_pg_connect.py``) lands; the two parse the same URLs.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fxdurable.errors import ConfigurationError

__all__ = ["MIGRATIONS", "PgQueueSettings", "connect", "migrate", "parse_pg_queue_url"]

DEFAULT_SCHEMA = "fxdurable"
DEFAULT_MAX_DELIVERIES = 3  # like an SQS redrive policy's usual maxReceiveCount
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,47}")

# Step N turns schema version N-1 into N. Append only: a deployed step never changes.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE {s}.fxd_wakes (
        id bigserial PRIMARY KEY,
        session_id text NOT NULL,
        reason text NOT NULL,
        traceparent text,
        run_at timestamptz NOT NULL,
        deliveries integer NOT NULL DEFAULT 0,
        claim uuid,
        dead boolean NOT NULL DEFAULT false,
        enqueued_at timestamptz NOT NULL DEFAULT now()
    );
    -- one pending (not yet claimed) wake per session; a claimed one may have a successor
    CREATE UNIQUE INDEX fxd_wakes_pending ON {s}.fxd_wakes (session_id)
        WHERE claim IS NULL AND NOT dead;
    CREATE INDEX fxd_wakes_due ON {s}.fxd_wakes (run_at) WHERE NOT dead;
    """,
)


@dataclass(frozen=True, slots=True)
class PgQueueSettings:
    url: str  # as given, for messages (a password is masked by ``where``)
    conninfo: str  # for libpq: the URL without our own options
    schema: str
    max_deliveries: int

    @property
    def where(self) -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        return f"postgresql://{host}{port}{parts.path}?schema={self.schema}"

    @property
    def channel(self) -> str:
        # NOTIFY channels are database-wide: one per schema, so two deployments on one
        # database do not wake each other's workers.
        return f"fxd_wake_{self.schema}"


def parse_pg_queue_url(url: str) -> PgQueueSettings:
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {url!r} (expected postgresql://...)")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    schema = options.pop("schema", DEFAULT_SCHEMA) or DEFAULT_SCHEMA
    if not _IDENT.fullmatch(schema):
        raise ConfigurationError(
            f"schema must be lower-case letters, digits or '_' (at most 48) in {url!r}"
        )
    try:
        max_deliveries = int(options.pop("max_deliveries", DEFAULT_MAX_DELIVERIES))
    except ValueError as exc:
        raise ConfigurationError(f"max_deliveries must be a whole number in {url!r}") from exc
    if max_deliveries < 1:
        raise ConfigurationError(f"max_deliveries must be at least 1 in {url!r}")
    conninfo = urlunsplit(parts._replace(query=urlencode(options)))
    return PgQueueSettings(url, conninfo, schema, max_deliveries)


def connect(settings: PgQueueSettings, *, timeout_s: float = 5) -> Any:
    """An autocommit connection (LISTEN needs one; each statement is its own transaction
    unless wrapped in ``conn.transaction()``). Callers map psycopg's errors."""
    import psycopg

    return psycopg.connect(
        settings.conninfo,
        autocommit=True,
        connect_timeout=max(1, int(timeout_s)),
        application_name="fxdurable-queue",
        options="-c statement_timeout=30000 -c lock_timeout=10000",
    )


def migrate(conn: Any, schema: str) -> None:
    """Bring ``schema`` to the code's version (idempotent; safe to race)."""
    s = f'"{schema}"'
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(schema.encode()) & 0x7FFFFFFF,)
        )
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.fxd_queue_version (version integer NOT NULL)")
        row = conn.execute(f"SELECT max(version) FROM {s}.fxd_queue_version").fetchone()
        version = row[0] if row and row[0] is not None else 0
        if version > len(MIGRATIONS):
            raise ConfigurationError(
                f"the queue schema {schema!r} is at version {version}, newer than this "
                f"fxdurable's {len(MIGRATIONS)}: upgrade fxdurable"
            )
        for number in range(version + 1, len(MIGRATIONS) + 1):
            conn.execute(MIGRATIONS[number - 1].format(s=s))
            conn.execute(f"INSERT INTO {s}.fxd_queue_version VALUES (%s)", (number,))
