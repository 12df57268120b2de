"""``bench/pg_workers.py`` (issue 27's Postgres workers row) at a tiny size: real ``fxdurable
worker --queue postgresql://`` processes on the test run's PostgreSQL, every run checked
exactly-once from the database, the figures printed. No timing is asserted (DESIGN §8)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import psycopg
import pytest

from bench import pg_worker_set
from bench.headline import pg_worker_rows
from bench.pg_exactly_once import ExactlyOnceError, check_effects, verify
from bench.pg_worker_set import WorkerSet, postmaster_of
from bench.pg_workers import measure_pg_workers, render_pg_workers, timed_run, warm_up
from bench.postgres_server import ENV


def _databases(server: str) -> set[str]:
    with psycopg.connect(server, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}


@pytest.mark.slow
def test_the_pg_workers_bench_checks_every_run_and_prints_its_figures(
    tmp_path: Path, postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, postgres_server)
    before = _databases(postgres_server)
    figures = measure_pg_workers(
        tmp_path, turns=4, calls=2, reps=1, on_progress=print, worker_counts=(1, 2)
    )
    assert figures.note == ""
    assert sorted(figures.runs) == [1, 2]
    for runs in figures.runs.values():
        (run,) = runs
        assert run.checked.startswith("4 submissions completed, 4 attempts, 12 model calls, ")
        assert "8 tool calls completed in 8 runs, 8 effects (each once)" in run.checked
        assert math.isfinite(run.steps_per_s) and run.steps_per_s > 0
        assert run.cpu_workers_s >= 0 and run.cpu_db_s is not None
    text = render_pg_workers(figures)
    for workers in (1, 2):
        assert re.search(
            rf"^ +{workers} +[0-9.,]+ +[0-9,]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$", text, re.M
        )
    assert re.search(r"^scaling: 2 workers ÷ 1 worker turns/s = [0-9.]+$", text, re.M), text
    assert re.search(r"^ratio pg workers 2 tool_steps_s +=  +[0-9.]+ ", text, re.M), text
    (row,) = pg_worker_rows(figures)
    assert row.ratio is not None and row.met in ("yes", "no")
    assert "turns/s" in row.cells["fxdurable"] and "CPU-bound" in row.note
    assert _databases(postgres_server) == before, "the bench left its databases behind"


@pytest.mark.slow
def test_the_check_fails_a_run_that_lost_a_turn(tmp_path: Path, postgres_server: str) -> None:
    group = WorkerSet(postgres_server, 1, tmp_path, calls=2, concurrency=1)
    try:
        group.start()
        warm_up(group, None)
        timed_run(group, "t", 3, None)
        with psycopg.connect(group.db_url, autocommit=True) as conn:
            assert verify(conn, group, "t", 3).startswith("3 submissions completed")
            with pytest.raises(ExactlyOnceError, match="submissions completed"):
                verify(conn, group, "t", 4)  # the run's fourth turn is nowhere
    finally:
        group.stop()


def test_the_effects_check_fails_a_doubled_or_a_missing_call() -> None:
    lines = [f"r0-{t} {i} e{t}{i}" for t in range(2) for i in range(3)]
    lines.append("r1-0 0 other-run")  # another run's line is not this run's
    assert check_effects(lines, "r0", 2, 3) == 6
    with pytest.raises(ExactlyOnceError, match="0 missing, 1 more than once"):
        check_effects([*lines, "r0-1 2 again"], "r0", 2, 3)
    with pytest.raises(ExactlyOnceError, match="1 missing, 0 more than once"):
        check_effects(lines[1:], "r0", 2, 3)


def test_the_postmaster_is_found_by_a_slow_reader(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend's /proc entry is read while its connection is open. Read after the close,
    it is gone once the backend exits, and the server's CPU went unmeasured (CI stop 37,
    a loaded machine): a reader slowed by 0.3 s stands for that machine."""
    real = pg_worker_set._stat

    def slow(pid: int) -> list[str] | None:
        time.sleep(0.3)
        return real(pid)

    monkeypatch.setattr(pg_worker_set, "_stat", slow)
    found = postmaster_of(postgres_server)
    assert found is not None and real(found) is not None
