"""``bench/lambda_turns.py`` at a tiny size: the turn completes both ways, the invocations are
counted, the ratio is printed. No timing is asserted (DESIGN §8)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from redis_support import unavailable

from bench.lambda_turns import measure_lambda_turns, render_lambda, unavailable_reason


@pytest.mark.slow
def test_the_lambda_bench_counts_invocations_and_prints_its_ratio(tmp_path: Path) -> None:
    missing = unavailable_reason()
    if missing is not None:
        unavailable(missing, "the Lambda bench test")  # a skip elsewhere, a failure in CI
    # Each tool (20 ms) outlasts the 10 ms the short invocations have beyond their margin, so
    # every tool ends its invocation; a model step (a few ms) may share one with the next tool.
    figures = measure_lambda_turns(tmp_path, ticks=2, tick_s=0.02, reps=1)
    assert figures.one_invocations == 1
    assert 3 <= figures.many_invocations <= 5  # 3 model steps and 2 tools
    assert math.isfinite(figures.ratio) and figures.ratio > 0
    text = render_lambda(figures)
    assert re.search(r"^ratio lambda_many_invocations_vs_one = [0-9.]+$", text, re.MULTILINE)
    assert not list(tmp_path.iterdir()), "the bench left files behind"
