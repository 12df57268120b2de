"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aws_support import moto_running


@pytest.fixture(scope="session")
def serial_moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server serving one request at a time, for tests of concurrent writers: moto's
    threaded server does not isolate concurrent transactions as DynamoDB does."""
    with moto_running(tmp_path_factory.mktemp("moto-serial"), serial=True) as endpoint_url:
        yield endpoint_url
