"""``python -m bench --quick`` runs to the end and prints its ratio lines.

No timing is asserted (DESIGN §8: performance is measured in ``bench/``, never in timed tests);
only that every ratio is printed as a finite positive number.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import RATIO_NAMES

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_bench_prints_every_ratio(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, f"bench failed:\n{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    assert re.search(r"machine: nproc \d+, \S+ \d+\.\d+\.\d+, SQLite \d+\.\d+", out), out
    for name in RATIO_NAMES:
        match = re.search(rf"^ratio {re.escape(name)}\s+=\s+([0-9.,]+)", out, re.MULTILINE)
        assert match, f"no ratio line for {name!r} in:\n{out}"
        value = float(match.group(1).replace(",", ""))
        assert math.isfinite(value) and value > 0, f"{name}: {value}"
    assert "raw commit (WAL, 1 INSERT), FULL" in out
    assert not list(tmp_path.iterdir()), "the bench left files behind in its --dir"
