"""Node.js for the console's JavaScript tests: the console ships as plain ES modules, and its
logic that needs no browser is tested under node."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS_TESTS = ROOT / "tests" / "console_js"


def node_or_skip() -> str:
    """The node executable. Without one: fail in CI (``CI=true``), skip elsewhere, as the
    Redis tests do."""
    node = shutil.which("node")
    if node is not None:
        return node
    message = (
        "node is not installed: the console's JavaScript tests need Node.js 18 or later "
        "(Debian: apt-get install -y nodejs)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {message}")
    pytest.skip(message)
