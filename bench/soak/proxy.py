"""The soak's TCP proxy (stall, black-hole, refuse): :class:`fxdurable.testing.faults.FaultProxy`,
shared with the tests."""

from __future__ import annotations

from fxdurable.testing.faults import FaultProxy, Mode

__all__ = ["FaultProxy", "Mode"]
