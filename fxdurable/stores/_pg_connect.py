"""PostgreSQL URLs and connection pools, shared by the Postgres store and wake queue.

A URL is libpq's (``postgresql://user:password@host:port/db``, ``postgres://`` too) plus
fxdurable's own query parameters, which are taken out before the rest goes to libpq (libpq
refuses parameters it does not know):

========================  ==========  ==================================================
parameter                 default     meaning
========================  ==========  ==================================================
``schema``                fxdurable   the schema the tables live in (created if missing)
``pool_min``              1           connections the pool keeps open
``pool_max``              10          connections at most; one per thread in a transaction
``pool_timeout_s``        30          how long a caller waits for a free connection before
                                      :class:`PoolExhaustedError`
``statement_timeout_ms``  30000       ``SET statement_timeout`` on every connection
``lock_timeout_ms``       10000       ``SET lock_timeout`` on every connection
``prepared``              on          ``off``: no named prepared statements (a pooler in
                                      transaction mode that does not track them, such as
                                      pgbouncer before 1.21); each statement is then
                                      parsed and planned on every use
``bucket``                (none)      the store's S3 bucket: blobs past ``offload_threshold``
                                      (65536 bytes) go there (:mod:`._pg_blobs`), with
                                      ``s3_prefix``, ``region``, ``endpoint_url`` and
                                      ``retry_budget_s`` as the DynamoDB store spells them
                                      (:mod:`._aws_options`)
========================  ==========  ==================================================

Every other parameter (``sslmode``, ``connect_timeout``, ``application_name``, ...) is
libpq's and passes through unchanged.

The settings are applied per connection when the pool opens it (``configure``), not per
transaction, so a transaction costs no extra ``SET`` round trips. Behind pgbouncer in
transaction mode session settings do not stick: there, set them on the role instead
(``ALTER ROLE ... SET statement_timeout = ...``; docs/postgres.md).
"""

from __future__ import annotations

import re
import select
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fxdurable.core.blobs import MAX_BLOB_BYTES
from fxdurable.errors import ConfigurationError, StoreUnavailableError
from fxdurable.stores._aws_options import AwsOptions, pop_aws_options

if TYPE_CHECKING:  # psycopg loads only when a postgresql:// URL is opened
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = [
    "PgSettings",
    "PoolExhaustedError",
    "open_pool",
    "parse_pg_url",
    "pool_exhausted",
    "quote_ident",
]

_SCHEMES = ("postgresql", "postgres")
_NEVER_AUTOMATICALLY = 2**62  # psycopg's prepare_threshold (None would refuse prepare=True)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class PoolExhaustedError(StoreUnavailableError):
    """Every connection of the pool stayed in use past ``pool_timeout_s``: raise ``pool_max``
    in the URL (and the server's ``max_connections`` if need be), or ``pool_timeout_s`` if
    waiting longer is fine. Nothing was written."""


@dataclass(frozen=True, slots=True)
class PgSettings:
    """A parsed ``postgresql://`` URL: what goes to libpq, and fxdurable's own parameters."""

    url: str  # as given (for messages and ``store.url``)
    conninfo: str  # the URL without fxdurable's parameters, for libpq
    where: str  # host:port/db, for error messages (no password)
    schema: str = "fxdurable"
    pool_min: int = 1
    pool_max: int = 10
    pool_timeout_s: float = 30.0
    statement_timeout_ms: int = 30000
    lock_timeout_ms: int = 10000
    prepared: bool = True  # the store's statements prepared on each connection's first use
    s3: AwsOptions | None = None  # None: no bucket, every blob in the table


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier; only plain identifiers are accepted (a schema
    name comes from a URL and ends up in DDL)."""
    if not _IDENT.match(name):
        raise ConfigurationError(
            f"schema {name!r} is not a plain identifier (letters, digits, _; at most 63)"
        )
    return f'"{name}"'


def _int(options: dict[str, str], name: str, default: int, url: str, low: int) -> int:
    raw = options.pop(name, None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer in {url!r}") from None
    if value < low:
        raise ConfigurationError(f"{name} must be at least {low} in {url!r}")
    return value


def parse_pg_url(url: str) -> PgSettings:
    """Split a ``postgresql://`` URL into libpq's part and fxdurable's settings (see the
    module); :class:`~fxdurable.errors.ConfigurationError` for anything malformed."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host:port/db)"
        )
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    schema = options.pop("schema", "fxdurable")
    quote_ident(schema)
    pool_min = _int(options, "pool_min", 1, url, 0)
    pool_max = _int(options, "pool_max", 10, url, 1)
    if pool_max < pool_min:
        raise ConfigurationError(f"pool_max must be at least pool_min in {url!r}")
    raw_timeout = options.pop("pool_timeout_s", "30")
    try:
        pool_timeout_s = float(raw_timeout)
    except ValueError:
        raise ConfigurationError(f"pool_timeout_s must be a number in {url!r}") from None
    if pool_timeout_s <= 0:
        raise ConfigurationError(f"pool_timeout_s must be positive in {url!r}")
    statement_ms = _int(options, "statement_timeout_ms", 30000, url, 0)
    lock_ms = _int(options, "lock_timeout_ms", 10000, url, 0)
    prepared = options.pop("prepared", "on")
    if prepared not in ("on", "off"):
        raise ConfigurationError(f"prepared must be on or off in {url!r}, not {prepared!r}")
    aws = pop_aws_options(options, url, max_threshold=MAX_BLOB_BYTES)
    needing_bucket = [name for name in aws.given if name != "bucket"]
    if aws.bucket is None and needing_bucket:
        raise ConfigurationError(
            f"{', '.join(needing_bucket)} only apply with an S3 bucket: add ?bucket=NAME to {url!r}"
        )
    conninfo = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(options), parts.fragment)
    )
    host = parts.hostname or "localhost"
    where = f"{host}:{parts.port or 5432}{parts.path or '/'}"
    return PgSettings(
        url=url,
        conninfo=conninfo,
        where=where,
        schema=schema,
        pool_min=pool_min,
        pool_max=pool_max,
        pool_timeout_s=pool_timeout_s,
        statement_timeout_ms=statement_ms,
        lock_timeout_ms=lock_ms,
        prepared=prepared == "on",
        s3=aws if aws.bucket is not None else None,
    )


def _check_if_told(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """The pool's check of a connection it is about to hand out, in no round trip when it can.

    ``ConnectionPool.check_connection`` sends an empty query each time: a round trip per
    store call, a fifth of a tool step's. An idle connection has nothing to read, so a socket
    with nothing to read needs no asking; a server that went away (a restart, a terminated
    backend) left its EOF or error there, and only then is the connection asked, and replaced
    if it fails. A connection whose server vanished without a word (a partition) passes here
    and fails at its first statement, which the store retries on a new one."""
    from psycopg_pool import ConnectionPool

    try:
        told, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        told = [True]  # no socket to look at: ask
    if told:
        ConnectionPool.check_connection(conn)


_RECONNECT_ON_ITS_OWN_S = 2.0


def open_pool(
    settings: PgSettings, *, name: str
) -> ConnectionPool[psycopg.Connection[tuple[object, ...]]]:
    """A pool of autocommit-off connections with the URL's timeouts and ``search_path`` set
    on each (``configure``); opened (``pool_min`` connections) before it returns, so a wrong
    URL or a server that is down fails here, as a :class:`StoreUnavailableError`."""
    from psycopg_pool import ConnectionPool, PoolTimeout

    schema = quote_ident(settings.schema)

    def configure(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        # One round trip; committed at once so a later ROLLBACK cannot undo it.
        conn.execute(
            f"SET search_path TO {schema}, public; "
            f"SET statement_timeout = {settings.statement_timeout_ms}; "
            f"SET lock_timeout = {settings.lock_timeout_ms}"
        )
        conn.commit()
        # The store issues its own BEGIN (with the isolation level each call needs), so the
        # driver must not open a transaction of its own before it.
        conn.autocommit = True
        # The store prepares its own statements explicitly, on their first use (prepare=True:
        # stores/postgres.py); nothing else is ever prepared. psycopg's automatic
        # preparation (after 5 uses) is unsafe in pipeline mode: a statement whose turn to be
        # prepared comes in a pipeline that an earlier error aborted is recorded as prepared
        # although the server skipped it, and its next use fails with "prepared statement
        # does not exist". An explicit first-use preparation takes the path that checks.
        conn.prepare_threshold = _NEVER_AUTOMATICALLY

    pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]] = ConnectionPool(
        settings.conninfo,
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        timeout=settings.pool_timeout_s,
        configure=configure,
        open=False,
        name=name,
        # A connection that died with its server (a restart) is replaced, not handed out.
        check=_check_if_told,
        # How long the pool retries a lost connection on its own (backoff 1 s, 2 s, ...)
        # before it leaves reconnecting to demand: psycopg_pool's default of 5 minutes let
        # its backoff grow past 8 s in a 10 s outage, so the first callers after the server
        # came back waited for the pool's next try, not for the server.
        reconnect_timeout=_RECONNECT_ON_ITS_OWN_S,
    )
    try:
        pool.open(wait=settings.pool_min > 0, timeout=settings.pool_timeout_s)
    except PoolTimeout as exc:
        pool.close()
        raise StoreUnavailableError(
            f"PostgreSQL at {settings.where} could not be connected to within "
            f"{settings.pool_timeout_s} s: check the URL and that the server is up",
            where=settings.where,
            cause=exc,
        ) from exc
    return pool


def pool_exhausted(settings: PgSettings, cause: BaseException) -> PoolExhaustedError:
    """The error a caller meets when no connection came free in time."""
    return PoolExhaustedError(
        f"PostgreSQL at {settings.where}: all {settings.pool_max} pooled connections stayed "
        f"in use past pool_timeout_s={settings.pool_timeout_s} (or the server could not be "
        "reached): raise ?pool_max= in the store URL (and the server's max_connections), or "
        "?pool_timeout_s= to wait longer",
        where=settings.where,
        cause=cause,
    )
