"""``bench/startup.py`` measures every startup case once and renders its rows. No timing is
asserted (performance is measured in ``bench/``, never in timed tests): only that each figure
is a positive number and each row is printed."""

from __future__ import annotations

import math
from pathlib import Path

from bench.redis_server import unavailable_reason
from bench.startup import measure_startup, render_startup


def test_one_repetition_of_every_case(tmp_path: Path) -> None:
    figures = measure_startup(tmp_path, reps=1, warm_up=False)
    cases = {"python", "import", "public_api", "first_step", "recovery"}
    if unavailable_reason() is None:
        cases.add("worker")
    assert set(figures.samples) == set(figures.cpu) == cases
    for case, values in figures.samples.items():
        assert len(values) == 1 and math.isfinite(values[0]) and values[0] > 0, case
        assert len(figures.cpu[case]) == 1 and not figures.cpu[case][0] < 0, case
    text = render_startup(figures)
    assert "import fxdurable" in text and "demo recovery" in text and "worker ready" in text
