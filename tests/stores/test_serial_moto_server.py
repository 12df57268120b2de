"""The one-request-at-a-time moto server the concurrent-writer tests run on (bench/moto_server.py).

A crash test SIGSTOPs a worker at a random moment, sometimes between its connect() and its
request: that frozen client must not stall the server for every other worker, or the test
waits for a worker that can never open its store (the SQS hung-worker test timed out so, once
in a few full runs).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest
from aws_support import aws_session
from botocore.config import Config

pytestmark = pytest.mark.aws


def test_a_client_frozen_after_connecting_does_not_stall_the_others(
    serial_moto_server: str,
) -> None:
    endpoint = urlsplit(serial_moto_server)
    assert endpoint.hostname is not None and endpoint.port is not None
    # Connected, nothing sent: what a process stopped between connect() and send() leaves.
    with socket.create_connection((endpoint.hostname, endpoint.port)):
        dynamodb = aws_session().client(
            "dynamodb",
            endpoint_url=serial_moto_server,
            # One attempt with a read timeout well past the server's stalled-client limit and
            # well short of forever: a stalled server fails it with ReadTimeoutError.
            config=Config(read_timeout=10, connect_timeout=10, retries={"max_attempts": 1}),
        )
        assert "TableNames" in dynamodb.list_tables()
