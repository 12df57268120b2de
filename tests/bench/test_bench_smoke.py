"""``python -m bench --quick`` runs to the end and prints its ratio lines.

No timing is asserted (DESIGN §8: performance is measured in ``bench/``, never in timed tests);
only that every ratio is printed as a finite positive number. The Redis and RQ ratios are
required where ``redis-server`` (and the redis extra) are installed; elsewhere the bench must
say why it skipped them and still print the SQLite figures. In CI (``CI=true``) a missing
``redis-server`` fails, as the Redis tests do.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.http_admit import HTTP_RATIO_NAMES
from bench.redis_server import unavailable_reason
from bench.report import RATIO_NAMES, REDIS_RATIO_NAMES

REPO = Path(__file__).resolve().parents[2]


def _ratio(out: str, name: str) -> float:
    match = re.search(rf"^ratio {re.escape(name)}\s+=\s+([0-9.,]+)", out, re.MULTILINE)
    assert match, f"no ratio line for {name!r} in:\n{out}"
    return float(match.group(1).replace(",", ""))


def _run_quick(tmp_path: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
    )
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout}\n{proc.stderr}"
    assert not list(tmp_path.iterdir()), "the bench left files behind in its --dir"
    return proc.stdout


@pytest.mark.slow
def test_quick_bench_prints_every_ratio(tmp_path: Path) -> None:
    missing = unavailable_reason()
    if missing is not None and os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{missing} (CI=true: the Redis/RQ bench rows must run)", pytrace=False)
    out = _run_quick(tmp_path)
    assert re.search(r"machine: nproc \d+, \S+ \d+\.\d+\.\d+, SQLite \d+\.\d+", out), out
    names = RATIO_NAMES if missing is not None else (*RATIO_NAMES, *REDIS_RATIO_NAMES)
    names = (*names, *HTTP_RATIO_NAMES)  # the test extras include the http extra
    for name in names:
        value = _ratio(out, name)
        assert math.isfinite(value) and value > 0, f"{name}: {value}"
    assert "raw commit (WAL, 1 INSERT), FULL" in out
    if missing is None:
        assert "raw round trip: SET (64 B), no AOF" in out
        assert "no-op job (rq worker, rq.Worker), 2 workers" in out
        # Every RQ figure comes with its jobs per turn (a wake, plus any continuation).
        for name in REDIS_RATIO_NAMES:
            if name.startswith("rq "):
                assert re.search(
                    rf"^ratio {re.escape(name)}\s+=.*RQ jobs and [0-9.]+ attempts per turn",
                    out,
                    re.MULTILINE,
                ), name
    else:
        assert f"Redis/RQ rows skipped: {missing}" in out


@pytest.mark.slow
def test_quick_bench_without_redis_server_says_why(tmp_path: Path) -> None:
    """With no redis-server on PATH, the SQLite figures are still printed, and a line says
    the Redis/RQ rows were skipped and why."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}  # the bench runs sys.executable, not a PATH lookup
    out = _run_quick(tmp_path / "dir", env)
    for name in RATIO_NAMES:
        value = _ratio(out, name)
        assert math.isfinite(value) and value > 0, f"{name}: {value}"
    assert "Redis/RQ rows skipped: redis-server is not on PATH" in out
    for name in REDIS_RATIO_NAMES:
        assert f"ratio {name} " not in out
