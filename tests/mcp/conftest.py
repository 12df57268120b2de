"""The MCP tests need the ``mcp`` extra (it is in ``[test]``, so a missing SDK fails them
rather than skipping them); each test's connections (and their stdio servers) are closed
after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """The MCP test server's outside world: its logs and its block/hide switches."""
    path = tmp_path / "world"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    from fxdurable.tools.mcp_connection import close_connections

    close_connections()
