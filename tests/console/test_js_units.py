"""The console's JavaScript units (tests/console_js/*.test.mjs), run with ``node --test``.

The console ships as plain ES modules without a build step; its logic that needs no browser
(the ndjson reader, the stream follower's reconnects, the timeline's dedupe and totals, the
rendering of every line type) is tested here under node. Without node the test fails in CI
(``CI=true``) and is skipped elsewhere, like the Redis tests: install Node.js 18 or later.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "tests" / "console_js"


def _node() -> str:
    node = shutil.which("node")
    if node is not None:
        return node
    message = (
        "node is not installed: the console's JavaScript unit tests need Node.js 18 or later "
        "(Debian: apt-get install -y nodejs)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {message}")
    pytest.skip(message)


def test_console_js_units() -> None:
    files = sorted(str(p) for p in UNITS.glob("*.test.mjs"))
    assert files, f"no *.test.mjs under {UNITS}"
    run = subprocess.run(
        [_node(), "--test", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    summary = [line for line in run.stdout.splitlines() if line.startswith(("# pass", "# fail"))]
    assert run.returncode == 0, f"node --test failed:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    assert summary and summary[-1] == "# fail 0", run.stdout[-2000:]
