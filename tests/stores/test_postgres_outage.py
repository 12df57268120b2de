"""The PostgreSQL store across an outage of its server (a fault proxy taken down): while
the server is away a call fails saying it could not connect, never "raise pool_max", and the
log says the store is riding out a lost connection; once the server is back the very next
call is answered, without waiting for the pool's reconnect backoff to run down.

Why the backoff matters: psycopg_pool retries a lost connection with a doubling delay for up
to 5 minutes by default. Calls made during a 10 s outage left it waiting 8 s between tries,
so the first calls after the server came back timed out in the pool (CI saw
``PoolExhaustedError`` there) although the server was up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fault_support import through_proxy

from fxdurable.errors import StoreUnavailableError
from fxdurable.stores._pg_connect import PoolExhaustedError
from fxdurable.stores.postgres import PostgresStore
from fxdurable.testing.faults import FaultProxy


@pytest.fixture
def store(postgres_url: str, postgres_proxy: FaultProxy) -> Iterator[PostgresStore]:
    url = through_proxy(postgres_url, postgres_proxy)
    s = PostgresStore(f"{url}&pool_timeout_s=1")  # each wait for a connection: 1 s
    yield s
    s.close()


def _read(store: PostgresStore) -> object:
    return store.read(lambda v: v.get_session("s1"))


def test_an_outage_is_said_as_such_and_the_first_read_after_it_is_answered(
    store: PostgresStore, postgres_proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    assert _read(store) is None  # connected, nothing there
    postgres_proxy.set_mode("down")
    with (
        caplog.at_level(logging.WARNING, logger="fxdurable.stores.postgres"),
        pytest.raises(StoreUnavailableError) as raised,
    ):
        _read(store)
    assert not isinstance(raised.value, PoolExhaustedError), raised.value
    assert "pool_max" not in str(raised.value)
    assert "could be opened within pool_timeout_s" in str(raised.value)
    lost = [r.getMessage() for r in caplog.records if "connection lost while reading" in r.message]
    assert len(lost) == 5, lost  # one line per reconnect, then the error
    assert "retrying (1 of 5)" in lost[0]
    postgres_proxy.resume()
    assert _read(store) is None  # at once: no wait for the pool's backoff
