"""The stores the abort and steer latency rows run on (bench/abort_latency.py), each on a
server of the bench's own: a store URL, or why there is none (``skipped: ...``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PAIRS", "Pair"]

Opened = tuple[str | None, str | None]  # (store URL, why there is none)


@dataclass(frozen=True, slots=True)
class Pair:
    """A deployment pair, by its store (the queue is not on an interrupt's path: an abort's
    or a steer's wake is dropped while the lease is held, so RQ and SQS do not change the
    figures). ``push``: how another process's interrupt reaches the holder."""

    name: str
    push: str
    server: Callable[[Path], AbstractContextManager[Opened]]


@contextlib.contextmanager
def _sqlite(tmp: Path) -> Iterator[Opened]:
    yield f"sqlite:///{tmp}/interrupts.db", None


@contextlib.contextmanager
def _redis(tmp: Path) -> Iterator[Opened]:
    from bench.redis_server import RedisServer, unavailable_reason

    missing = unavailable_reason()
    if missing is not None:
        yield None, f"skipped: {missing}"
        return
    with RedisServer(tmp / "redis", appendonly=True) as server:
        yield server.store_url(0, "interrupts"), None


@contextlib.contextmanager
def _dynamodb(tmp: Path) -> Iterator[Opened]:
    from bench.dynamodb_steps import unavailable_reason
    from bench.moto_server import moto_server

    missing = unavailable_reason()
    if missing is not None:
        yield None, f"skipped: {missing}"
        return
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(key, value)  # the aborting process inherits them
    (tmp / "moto").mkdir()
    with moto_server(tmp / "moto") as endpoint:
        yield f"dynamodb://fxd-interrupts?region=us-east-1&endpoint_url={endpoint}", None


@contextlib.contextmanager
def _postgres(tmp: Path) -> Iterator[Opened]:
    from bench.postgres_server import drop_database, fresh_database, postgres_server

    try:
        import psycopg  # noqa: F401
    except ImportError:
        yield None, "skipped: psycopg is not installed: pip install 'fxdurable[postgres]'"
        return
    with postgres_server() as server:
        if server is None:
            yield None, "skipped: no PostgreSQL (apt-get install postgresql)"
            return
        url = fresh_database(server, "fxd_interrupts")
        try:
            yield url, None
        finally:
            drop_database(url)


PAIRS = (
    Pair("SQLite embedded", "poll", _sqlite),
    Pair("RQ + Redis", "pub/sub", _redis),
    Pair("SQS + DynamoDB on moto", "poll", _dynamodb),
    Pair("Postgres queue + store", "NOTIFY", _postgres),
)
