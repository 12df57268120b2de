"""``python -m bench --smoke`` (a quick run's every section, once, at tiny sizes) runs to the
end and prints its ratio lines; the headline's
fxdurable side and its results writer work at a tiny size.

No timing is asserted (DESIGN §8: performance is measured in ``bench/``, never in timed tests);
only that every ratio is printed as a finite positive number. The Redis and RQ ratios are
required where ``redis-server`` (and the redis extra) are installed; elsewhere the bench must
say why it skipped them and still print the SQLite figures. In CI (``CI=true``) a missing
``redis-server`` fails, as the Redis tests do.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.abort_latency import InterruptLatency, LatencyRow
from bench.headline import Headline, startup_rows
from bench.headline_measure import HeadlinePlan, measure_headline
from bench.http_admit import HTTP_RATIO_NAMES
from bench.loop_lag import measure_loop_lag, render_loop_lag
from bench.parallel_tools import PARALLEL_RATIO_NAMES, measure_parallel, render_parallel
from bench.peer_fxdurable import ONE_RESPONSE
from bench.peers import POSTGRES, PeerRun
from bench.redis_server import unavailable_reason
from bench.report import RATIO_NAMES, REDIS_RATIO_NAMES
from bench.results_file import write_results
from bench.startup import StartupFigures
from bench.timing import machine_facts

REPO = Path(__file__).resolve().parents[2]


def _ratio(out: str, name: str) -> float:
    match = re.search(rf"^ratio {re.escape(name)}\s+=\s+([0-9.,]+)", out, re.MULTILINE)
    assert match, f"no ratio line for {name!r} in:\n{out}"
    return float(match.group(1).replace(",", ""))


def _run_quick(tmp_path: Path, env: dict[str, str] | None = None, *flags: str) -> str:
    proc = subprocess.run(
        # The headline has its own quick tests below; leaving it out keeps these at their time.
        [sys.executable, "-m", "bench", "--smoke", "--no-headline", "--dir", str(tmp_path), *flags],
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
    names = (*names, *HTTP_RATIO_NAMES, *PARALLEL_RATIO_NAMES)  # the test extras: http
    for name in names:
        value = _ratio(out, name)
        assert math.isfinite(value) and value > 0, f"{name}: {value}"
    assert "raw commit (WAL, 1 INSERT), FULL" in out
    # The test extras include boto3 and moto: the DynamoDB requests are counted, and a step
    # costs the same at 10 and 200 earlier messages: two (the merged commits, issue 23 §2,
    # and the holder's read after its commit served from it).
    for earlier in (10, 200):
        assert re.search(rf"tool step \+ its model call, +{earlier} msgs +2$", out, re.M), out
    # Issue 27's Postgres workers section: its figures where a PostgreSQL is installed (the
    # smoke size runs 1 and 2 workers), else the line saying why it was skipped.
    assert re.search(r"^ratio pg workers 2/1 turns_s +=", out, re.M) or re.search(
        r"^Postgres workers \(issue 27\).*\nskipped: ", out, re.M
    ), out
    # Issue 28's abort and steer latency: at the smoke size, SQLite's two rows, each with
    # both kinds' figures (no timing asserted: only that each is measured).
    assert "abort and steer latency (issue 28, target p99 ≤ 500 ms)" in out, out
    for path in ("same process", "other process: poll"):
        assert re.search(
            rf"^\| SQLite embedded \| {path} \|( [0-9.,]+ ms \|){{4}} 1 \+ 1 \|", out, re.M
        ), out
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
    the Redis/RQ rows were skipped and why. ``--only core``: the sections the Redis/RQ rows
    sit beside (the others, startup, HTTP, DynamoDB and Lambda, run the same with or without
    a redis-server, and the test above runs them: this one took 40 % of the file's time)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}  # the bench runs sys.executable, not a PATH lookup
    out = _run_quick(tmp_path / "dir", env, "--only", "core")
    assert "core only" in out, out
    for name in RATIO_NAMES:
        value = _ratio(out, name)
        assert math.isfinite(value) and value > 0, f"{name}: {value}"
    assert "Redis/RQ rows skipped: redis-server is not on PATH" in out
    for name in REDIS_RATIO_NAMES:
        assert f"ratio {name} " not in out


# -- the headline (issue 10): fxdurable beside DBOS and LangGraph -----------------------------

TINY = HeadlinePlan(
    reps=1,
    ns=(2, 4),
    steps=4,
    growth_events=60,
    growth_rounds=2,
    rss_early=2,
    rss_late=4,
    rss_reps=1,
    redis=False,
    batch_calls=8,  # one timed batch of 8 after the untimed one
)


@pytest.fixture(scope="module")
def headline(tmp_path_factory: pytest.TempPathFactory) -> Headline:
    return measure_headline(tmp_path_factory.mktemp("headline"), TINY, "tiny", lambda _: None)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def _missing_peers(runs: dict[str, PeerRun]) -> list[str]:
    """The peers that are not installed, each with a note saying so; every installed one
    measured. What the bench imports: langchain's extra brings langgraph into the test
    environment, but not its SQLite checkpointer, which the LangGraph peer runs on."""
    missing = []
    for system, module in (("DBOS", "dbos"), ("LangGraph", "langgraph.checkpoint.sqlite")):
        run = runs[system]
        if _installed(module):
            assert run.note is None and run.samples, run.note
        else:
            assert run.note is not None and run.note.startswith("not installed"), run.note
            missing.append(system)
    return missing


def test_headline_measures_fxdurable_and_says_which_peers_are_missing(headline: Headline) -> None:
    """The fxdurable side of every row is measured; a peer that is not installed (the test
    environment has neither: they live in .venv-bench) is a cell saying so, not a crash."""
    fxd = headline.peers["fxdurable"]
    assert fxd.note is None
    # The Postgres mode on the run's own server (tests/postgres_support.py's, as the suite's).
    for mode in ("WAL+FULL", "WAL+NORMAL", POSTGRES):
        for shape in (mode, mode + ONE_RESPONSE):
            for n in ("2", "4"):
                (value,) = fxd.samples[shape][n]
                assert math.isfinite(value) and value > 0
    out = headline.render()
    assert "ms per step, 4 steps per unit, PostgreSQL" in out
    # Issue 23's and 27's sequential tool step: N calls of one response, beside the peers'.
    for where in ("WAL+FULL", "WAL+NORMAL", "PostgreSQL"):
        row = re.search(
            rf"^\| ms per tool step, 4 calls of one response, {re.escape(where)} .*$", out, re.M
        )
        assert row and "| ≥ 2 " in row.group(0), out
    for system in _missing_peers(headline.peers):
        assert f"| {system}" in out and "not installed" in out
    (growth,) = headline.growth  # SQLite only: TINY leaves Redis out
    assert growth.long_events > growth.short_events and growth.ratios[0] > 0
    assert headline.rss[0].ratio > 0
    assert "| what " in out and "| met? |" in out
    assert "runtime round, ~" in out and "RSS after 4 ÷ after 2 turns" in out


def test_headline_has_the_parallel_batch_row(headline: Headline) -> None:
    """Issue 23's row: fxdurable's ms per call of a batch of 8 parallel safe calls is
    measured, the row is in the table with its target, the raw figures are printed below it,
    and a peer that is not installed says so in its cell and its raw line."""
    (value,) = headline.batch["fxdurable"].samples["WAL+FULL"]["8"]
    assert math.isfinite(value) and value > 0
    out = headline.render()
    row = re.search(r"^\| ms per call, parallel batch of 8 safe calls, WAL\+FULL .*$", out, re.M)
    assert row and "| ≥ 4 " in row.group(0), out
    assert re.search(r"^- fxdurable \(WAL\+FULL\): [0-9.]+$", out, re.M), out
    for system in _missing_peers(headline.batch):
        assert "| not installed " in row.group(0), row.group(0)
        assert re.search(rf"^- {system} \(.*\): not installed", out, re.M), out


def test_results_are_written_with_machine_versions_and_modes(
    headline: Headline, tmp_path: Path
) -> None:
    json_path, md_path = write_results(
        headline,
        machine=machine_facts(tmp_path),
        elapsed_s=1.0,
        ratios={"x": {"value": 1.0, "note": "n"}},
        report="(the rest)",
        root=tmp_path,
    )
    assert json_path == tmp_path / "bench" / "results" / "latest.json"
    data = json.loads(json_path.read_text())
    assert data["machine"]["nproc"] >= 1 and data["machine"]["python"]
    assert data["versions"]["fxdurable"]
    assert set(data["modes"]) == {"fxdurable", "DBOS", "LangGraph"}
    assert data["headline"][0]["target"] == "≥ 2"
    fxd = data["seconds_per_step"]["fxdurable"]["WAL+FULL"]["2"]
    assert fxd["min"] <= fxd["median"] <= fxd["max"]
    assert data["batch_seconds_per_call"]["fxdurable"]["WAL+FULL"]["8"]["median"] > 0
    md = md_path.read_text()
    assert md_path == tmp_path / "docs" / "benchmarks.md"
    assert "make bench" in md and "| what " in md and "(the rest)" in md
    # A run that did not measure the interrupts says so where their section goes.
    assert data["abort_steer_latency"] is None
    assert "## Abort and steer latency" in md and "Not measured in this run" in md


def test_the_abort_and_steer_section_has_every_row_and_sample(
    headline: Headline, tmp_path: Path
) -> None:
    """docs/aborting.md links to the section's anchor; the JSON keeps every sample."""
    measured = LatencyRow(
        "RQ + Redis", "other process: pub/sub", [(0.010, 0.004), (0.600, 0.002)], [(0.02, 0.01)]
    )
    missing = LatencyRow("Postgres queue + store", "same process", [], [], "skipped: no server")
    json_path, md_path = write_results(
        headline,
        machine=machine_facts(tmp_path),
        elapsed_s=1.0,
        ratios={},
        report="(the rest)",
        interrupts=InterruptLatency(2, [measured, missing]),
        root=tmp_path,
    )
    md = md_path.read_text()
    assert "\n## Abort and steer latency\n" in md  # the anchor #abort-and-steer-latency
    assert "2 samples of each kind per row." in md
    # p50 of 10 and 600 ms is their mean; the nearest-rank p99 of two is the larger: > 500 ms.
    row = "| RQ + Redis | other process: pub/sub | 305.0 ms | 600.0 ms | 20.0 ms | 20.0 ms"
    assert f"{row} | 2 + 1 | 4.0 ms / 10.0 ms | no |" in md, md
    assert "| Postgres queue + store | same process | skipped: no server |" in md
    data = json.loads(json_path.read_text())["abort_steer_latency"]
    assert data["target_p99_ms"] == 500
    got = data["rows"][0]
    assert got["abort"]["ms"] == [10.0, 600.0] and got["abort"]["p99_ms"] == 600.0
    assert got["steer"]["from_return_ms"] == [10.0]
    assert data["rows"][1]["note"] == "skipped: no server" and data["rows"][1]["abort"]["ms"] == []


def test_startup_rows_check_each_figure_against_its_target() -> None:
    """Startup has no reference to divide by: the row checks the seconds themselves."""
    figures = StartupFigures(reps=2, samples={"import": [0.1, 0.12], "worker": [0.5, 0.4]})
    rows = {row.what: row for row in startup_rows(figures)}
    assert rows["import fxdurable (fresh process)"].met == "yes"
    worker = rows["worker ready (spawn → registered with Redis)"]
    assert (worker.met, worker.target, worker.is_ratio) == ("no", "≤ 0.30 s", False)
    assert len(rows) == 2  # cases that were not measured have no row


def test_the_parallel_tools_row_prints_its_ratio(tmp_path: Path) -> None:
    """The ``make bench`` row of parallel tool calls, at one timed turn per variant: both
    variants complete and the ratio line is a finite positive number (its size is the
    bench's to report, not a test's to assert)."""
    out = render_parallel(measure_parallel(tmp_path, reps=1))
    for name in PARALLEL_RATIO_NAMES:
        value = _ratio(out, name)
        assert math.isfinite(value) and value > 0, f"{name}: {value}"


def test_the_loop_lag_rows_cover_both_crossings_in_both_modes(tmp_path: Path) -> None:
    """The ``make bench`` rows of event-loop lag under 8 concurrent sessions, at 2 steps a
    turn: one row per crossing (thread, on the loop) and durability mode, each with figures
    (their size is the bench's to report, not a test's to assert)."""
    from fxdurable.runtime import crossing, worker

    shipped = crossing.durable
    out = render_loop_lag(measure_loop_lag(tmp_path, rounds=1, steps=2))
    for kind in ("thread", "on loop"):
        for mode in ("FULL", "NORMAL"):
            assert re.search(rf"^{kind} +{mode} +[0-9.]+ \(", out, re.MULTILINE), out
    # The "on loop" rows patch every module's crossing: each is put back, crossing's own too
    # (before, later tests of this process ran their journal calls on the loop).
    assert crossing.durable is shipped and worker.durable is shipped
    assert shipped.__module__ == "fxdurable.runtime.crossing"
