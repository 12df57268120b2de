"""Every store, as a pytest parameter: SQLite in the test's directory, Redis on the run's
redis-server (a key prefix of the test's own), DynamoDB on the serial moto server. For tests
of one journal behaviour that must hold on each store alike.

    @pytest.fixture(params=STORES)
    def store(request, tmp_path):
        opened = open_store(request, tmp_path)
        yield opened
        opened.close()
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fxdurable.core.store import Store

__all__ = ["STORES", "open_store"]

_MARKS = {"redis": pytest.mark.redis, "dynamodb": pytest.mark.aws}
STORES = [pytest.param(n, marks=_MARKS.get(n, ())) for n in ("dynamodb", "redis", "sqlite")]


def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """The store ``request.param`` names (one of :data:`STORES`)."""
    if request.param == "sqlite":
        from fxdurable.stores.sqlite import SqliteStore

        return SqliteStore(f"sqlite:///{tmp_path}/fx.db")
    if request.param == "redis":
        from fxdurable.stores.redis import RedisStore

        return RedisStore(request.getfixturevalue("redis_url"))
    from dynamo_support import dynamo_store

    return dynamo_store(request.getfixturevalue("serial_moto_server"))
