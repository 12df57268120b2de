"""The console's JavaScript units (tests/console_js/*.test.mjs), run with ``node --test``:
the ndjson reader, the stream follower's reconnects, the timeline's dedupe and totals, the
rendering of every line type, the answer bodies and the routes."""

from __future__ import annotations

import subprocess

from node_support import JS_TESTS, ROOT, node_or_skip


def test_console_js_units() -> None:
    files = sorted(str(p) for p in JS_TESTS.glob("*.test.mjs"))
    assert files, f"no *.test.mjs under {JS_TESTS}"
    run = subprocess.run(
        [node_or_skip(), "--test", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    summary = [line for line in run.stdout.splitlines() if line.startswith(("# pass", "# fail"))]
    assert run.returncode == 0, f"node --test failed:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    assert summary and summary[-1] == "# fail 0", run.stdout[-2000:]
