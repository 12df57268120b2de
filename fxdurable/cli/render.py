"""The CLI's name for :mod:`fxdurable.runtime.render` (the HTTP trace route shares it, and the
HTTP layer may not import the CLI)."""

from __future__ import annotations

from fxdurable.runtime.render import Style, clock_time, describe

__all__ = ["Style", "clock_time", "describe"]
