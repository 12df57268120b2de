"""The ``store`` fixture: one store of each backend, for the contract suites
(test_store_contract.py, test_store_blobs.py).

To add a backend, write a factory ``(request, tmp_path) -> Store`` (it may ask ``request``
for fixtures, as the Redis one asks for a server) and add it to ``FACTORIES`` with the marks
its tests need in ``MARKS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_support import fault_proxy

from fxdurable.core.store import Store
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing.faults import FaultProxy


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return SqliteStore(f"sqlite:///{tmp_path}/contract.db")


def _redis(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    from fxdurable.stores.redis import RedisStore

    return RedisStore(request.getfixturevalue("redis_url"))  # a key prefix of this test's own


def _dynamodb(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    from dynamo_support import dynamo_store

    # A table of this test's own, on the serial server: contract tests race writers.
    return dynamo_store(request.getfixturevalue("serial_moto_server"))


def _dynamodb_s3(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Every record past 64 bytes goes to S3: the whole contract runs through the offload."""
    from dynamo_support import dynamo_store

    return dynamo_store(request.getfixturevalue("serial_moto_server"), offload_threshold=64)


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    from fxdurable.stores.postgres import PostgresStore

    return PostgresStore(request.getfixturevalue("postgres_url"))  # a schema of this test's own


def _postgres_s3(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """Every blob past 64 bytes goes to S3: the whole contract runs through the offload."""
    from pg_s3_support import pg_s3_store

    return pg_s3_store(
        request.getfixturevalue("postgres_url"), request.getfixturevalue("moto_server"), 64
    )


FACTORIES: dict[str, Callable[[pytest.FixtureRequest, Path], Store]] = {
    "sqlite": _sqlite,
    "redis": _redis,
    "dynamodb": _dynamodb,
    "dynamodb-s3": _dynamodb_s3,
    "postgres": _postgres,
    "postgres-s3": _postgres_s3,
}
MARKS: dict[str, pytest.MarkDecorator] = {
    "redis": pytest.mark.redis,
    "dynamodb": pytest.mark.aws,
    "dynamodb-s3": pytest.mark.aws,
    "postgres-s3": pytest.mark.aws,
}


@pytest.fixture(
    params=[pytest.param(name, marks=MARKS.get(name, ())) for name in sorted(FACTORIES)]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = FACTORIES[request.param](request, tmp_path)
    yield s
    s.close()


@pytest.fixture
def postgres_proxy(postgres_url: str) -> Iterator[FaultProxy]:
    """A fault proxy before this test's PostgreSQL (the outage and lost-commit tests)."""
    with fault_proxy(postgres_url, 5432) as proxy:
        yield proxy
