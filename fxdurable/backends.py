"""Backends by URL: the one place that turns a store or queue URL into an object.

The runtime's constructor, the CLI, the RQ workers and the HTTP handlers all open their
stores and queues here, so a URL means the same thing everywhere and its errors read the same.
Every backend is imported only when a URL names it, so those that need an optional package
(``redis``, ``rq``, ``boto3``) load only for a ``redis://``, ``rq://``, ``sqs://`` or
``dynamodb://`` URL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fxdurable.errors import ConfigurationError

if TYPE_CHECKING:  # annotations only: the store's records load with the store a URL names
    from fxdurable.core.queue import WakeQueue
    from fxdurable.core.store import Store
    from fxdurable.queues.rq import RqQueue

__all__ = [
    "DEFAULT_QUEUE",
    "DEFAULT_STORE",
    "migrate_store",
    "open_queue",
    "open_rq_queue",
    "open_store",
]

DEFAULT_STORE = "sqlite:///.fxd/fxd.db"
DEFAULT_QUEUE = "local"


def open_store(url: str, *, create: bool = True, schema_checked: bool = False) -> Store:
    """Open the store a URL names: ``sqlite:///path.db`` (the embedded default),
    ``redis://host:port/db`` (``rediss://`` for TLS; needs ``pip install 'fxdurable[redis]'``)
    or ``dynamodb://TABLE?region=...`` (needs ``pip install 'fxdurable[aws]'``) or
    ``postgresql://user@host:port/db?schema=fxdurable`` (needs ``pip install
    'fxdurable[postgres]'``; docs/postgres.md).

    ``create=False`` is for read-only tools: a missing or foreign store is an error, and
    nothing (not even the schema) is written.

    ``schema_checked``: another process of this deployment (the forking worker whose work horse
    this is) has just migrated or checked the store, so a SQLite store skips its check (and the
    connection it would open for it); the other stores check as always.
    """
    scheme = url.split(":", 1)[0]
    if scheme == "sqlite":
        from fxdurable.stores.sqlite import SqliteStore

        return SqliteStore(url, create=create, schema_checked=schema_checked)
    if scheme in ("redis", "rediss"):
        try:
            from fxdurable.stores.redis import RedisStore
        except ImportError as exc:  # the module itself maps a missing redis package
            raise ConfigurationError(
                f"the Redis store cannot be loaded ({exc}): pip install 'fxdurable[redis]'"
            ) from exc

        return RedisStore(url, create=create)
    if scheme == "dynamodb":
        try:
            from fxdurable.stores.dynamodb import DynamoStore
        except ImportError as exc:  # the module itself maps a missing boto3
            raise ConfigurationError(
                f"the DynamoDB store cannot be loaded ({exc}): pip install 'fxdurable[aws]'"
            ) from exc

        return DynamoStore(url, create=create)
    if scheme in ("postgresql", "postgres"):
        try:
            from fxdurable.stores.postgres import PostgresStore
        except ImportError as exc:  # psycopg is the postgres extra
            raise ConfigurationError(
                f"the PostgreSQL store cannot be loaded ({exc}): pip install 'fxdurable[postgres]'"
            ) from exc

        return PostgresStore(url, create=create)
    raise ConfigurationError(
        f"unknown store URL {url!r}: expected sqlite:///path.db, redis://host:port/db, "
        "dynamodb://TABLE?region=... or postgresql://user@host:port/db"
    )


def migrate_store(url: str) -> tuple[str, int, int] | None:
    """Apply the migrations the store at ``url`` lacks (``fxdurable migrate``): (what was
    migrated, version before, version after), where what is ``"schema"`` for PostgreSQL (it
    never migrates itself once it holds data) and ``"layout"`` for Redis and DynamoDB (their
    breaking layout steps wait for this command; a writer's open applies compatible ones);
    None for SQLite, which migrates on open, which this does."""
    scheme = url.split(":", 1)[0]
    if scheme in ("postgresql", "postgres"):
        from fxdurable.stores.postgres import migrate as migrate_postgres

        return ("schema", *migrate_postgres(url))
    if scheme in ("redis", "rediss"):
        from fxdurable.stores.redis import migrate as migrate_redis

        return ("layout", *migrate_redis(url))
    if scheme == "dynamodb":
        from fxdurable.stores.dynamodb import migrate as migrate_dynamodb

        return ("layout", *migrate_dynamodb(url))
    open_store(url).close()
    return None


def open_queue(url: str) -> WakeQueue:
    """``local`` (in-process, the embedded default), ``rq://host:port/db?queue=name``,
    ``sqs://QUEUE_URL_OR_NAME?region=...`` (needs ``pip install 'fxdurable[aws]'``) or
    ``postgresql://host/db?schema=...`` (needs ``pip install 'fxdurable[postgres]'``)."""
    if url == "local":
        from fxdurable.queues.local import LocalQueue

        return LocalQueue()
    if _is_rq(url):
        return open_rq_queue(url)
    if url.startswith("sqs://"):
        try:
            from fxdurable.queues.sqs import SqsQueue
        except ImportError as exc:
            raise ConfigurationError(
                f"the SQS queue cannot be loaded ({exc}): pip install 'fxdurable[aws]'"
            ) from exc

        return SqsQueue(url)
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from fxdurable.queues.postgres import PgQueue
        except ImportError as exc:
            raise ConfigurationError(
                f"the Postgres queue cannot be loaded ({exc}): pip install 'fxdurable[postgres]'"
            ) from exc

        return PgQueue(url)
    raise ConfigurationError(
        f"unknown queue URL {url!r}: expected 'local', rq://host:port/db?queue=name, "
        "sqs://QUEUE_URL_OR_NAME?region=... or postgresql://host/db?schema=..."
    )


def open_rq_queue(url: str) -> RqQueue:
    """The RQ queue an ``rq://`` (``rqs://`` for TLS) URL names: what ``fxdurable worker`` and
    ``fxdurable scan`` consume and feed, which no other queue can stand in for."""
    if not _is_rq(url):
        raise ConfigurationError(f"RQ workers and scans need an rq://... queue URL, not {url!r}")
    from fxdurable.queues.rq import RqQueue

    return RqQueue(url)


def _is_rq(url: str) -> bool:
    return url.split(":", 1)[0] in ("rq", "rqs")
