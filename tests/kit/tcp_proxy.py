"""The TCP proxy the lease tests put between worker processes and a server, to make the server
*away* on demand (``proxy.paused()``): now :class:`fxdurable.testing.faults.FaultProxy`, shared
with the soak and the lost-answer tests."""

from __future__ import annotations

from fxdurable.testing.faults import FaultProxy as TcpProxy

__all__ = ["TcpProxy"]
