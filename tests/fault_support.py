"""A :class:`~fxdurable.testing.faults.FaultProxy` in front of a test server given by its URL,
and that URL pointed through the proxy: the lost-commit and outage tests of every store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlsplit

from fxdurable.testing.faults import FaultProxy

__all__ = ["fault_proxy", "through_proxy"]


@contextlib.contextmanager
def fault_proxy(url: str, default_port: int) -> Iterator[FaultProxy]:
    """A proxy forwarding to the host and port of ``url`` (``default_port`` if it names none)."""
    where = urlsplit(url)
    with FaultProxy(where.hostname or "127.0.0.1", where.port or default_port) as proxy:
        yield proxy


def through_proxy(url: str, proxy: FaultProxy) -> str:
    """``url`` with its host and port replaced by the proxy's (its user and password kept)."""
    where = urlsplit(url)
    userinfo, at, _ = where.netloc.rpartition("@")
    return where._replace(netloc=f"{userinfo}{at}127.0.0.1:{proxy.port}").geturl()
