"""Timers under real SIGKILLs (issue 28 §1), on the embedded runtime and each store of the
crash suite (``store_url``, tests/crash/conftest.py): a question's timer that comes due while
no worker runs, and a timeout racing a person's answer, killed between the expiry's commit and
the wake it enqueues (``input.after-expire``). Time passes by an injected clock (the driver's
``--clock-ahead``), never by sleeping.

Every time: the question is asked once and answered once (one ``input.answered``), by the
expiry or by the person, never both; the deny of an expired question means the deploy never
ran; the store's invariants (DESIGN §5) hold at rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fxdurable.backends import open_store
from fxdurable.testing.invariants import check_store

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "timers_driver.py"
HOUR = 3600.0


def drive(store_url: str, world: Path, *args: str, crash_at: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = str(ROOT)
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, str(DRIVER), *args, "--store", store_url, "--dir", str(world)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _check(store_url: str, world: Path, *, answer: str, timed_out: bool) -> None:
    store = open_store(store_url)
    try:
        summary = store.read(lambda v: check_store(v, now=0.0, at_rest=True))
        assert summary.violations == (), summary.violations
        events = store.read(lambda v: v.events("s"))
        assert [e.type for e in events].count("input.requested") == 1
        answered = [e.data["answer"] for e in events if e.type == "input.answered"]
        assert answered == [answer]  # answered once: by the expiry or the person
        (sub,) = store.read(lambda v: v.submissions("s"))
        (task,) = store.read(lambda v: v.tool_tasks(sub.id))
        assert task.answer is not None and task.answer.timed_out is timed_out
    finally:
        store.close()
    effects = (
        (world / "effects.log").read_text().split() if (world / "effects.log").exists() else []
    )
    assert effects == ([] if answer == "deny" else ["2.0"])


@pytest.fixture
def setup(store_url: str, tmp_path: Path) -> tuple[str, Path]:
    world = tmp_path / "world"
    world.mkdir()
    return store_url, world


def test_a_timer_due_while_no_worker_ran_fires_when_one_looks(setup) -> None:
    store_url, world = setup
    # Killed as the question committed: the process that would have armed the wake is gone.
    asked = drive(store_url, world, "submit", crash_at="input.after-request:deploy")
    assert asked.returncode == -signal.SIGKILL, (asked.returncode, asked.stderr)
    resumed = drive(store_url, world, "resume", "--clock-ahead", str(HOUR))
    assert resumed.returncode == 0, resumed.stderr
    assert "settled completed done" in resumed.stdout, resumed.stdout
    _check(store_url, world, answer="deny", timed_out=True)


def test_a_kill_after_the_expiry_committed_leaves_it_the_only_answer(setup) -> None:
    store_url, world = setup
    asked = drive(store_url, world, "submit")
    assert asked.returncode == 0 and "asked" in asked.stdout, asked.stderr
    expiring = drive(
        store_url, world, "resume", "--clock-ahead", str(HOUR), crash_at="input.after-expire"
    )
    assert expiring.returncode == -signal.SIGKILL, (expiring.returncode, expiring.stderr)
    # A person's answer now is too late: the expiry's commit won the race.
    late = drive(store_url, world, "resume", "--clock-ahead", str(HOUR), "--answer")
    assert late.returncode == 0, late.stderr
    assert "expiry won" in late.stdout and "settled completed done" in late.stdout, late.stdout
    _check(store_url, world, answer="deny", timed_out=True)


def test_an_answer_before_the_timer_is_due_wins_after_a_kill(setup) -> None:
    store_url, world = setup
    asked = drive(store_url, world, "submit", crash_at="input.after-request:deploy")
    assert asked.returncode == -signal.SIGKILL, (asked.returncode, asked.stderr)
    answered = drive(store_url, world, "resume", "--answer")
    assert answered.returncode == 0, answered.stderr
    assert "answer won" in answered.stdout and "settled completed done" in answered.stdout
    # Later, past the timer: nothing is left to expire.
    later = drive(store_url, world, "resume", "--clock-ahead", str(HOUR))
    assert later.returncode == 0 and "settled completed done" in later.stdout, later.stderr
    _check(store_url, world, answer="allow", timed_out=False)


def test_a_sleep_resumed_after_a_kill_waits_only_for_what_is_left(setup) -> None:
    """Killed once the nap's wake-up time (a step) is recorded; the next process's clock is an
    hour on: the nap's re-execution replays the recorded time and does not sleep again (a
    fresh hour's sleep would outlast the driver's 20 s wait and fail the run)."""
    store_url, world = setup
    spec = "tool.step.after-record:nap"
    napping = drive(store_url, world, "submit", "--scenario", "sleep", crash_at=spec)
    assert napping.returncode == -signal.SIGKILL, (napping.returncode, napping.stderr)
    resumed = drive(store_url, world, "resume", "--scenario", "sleep", "--clock-ahead", str(HOUR))
    assert resumed.returncode == 0, resumed.stderr
    assert "settled completed done" in resumed.stdout, resumed.stdout
    store = open_store(store_url)
    try:
        summary = store.read(lambda v: check_store(v, now=0.0, at_rest=True))
        assert summary.violations == (), summary.violations
        (sub,) = store.read(lambda v: v.submissions("s"))
        (task,) = store.read(lambda v: v.tool_tasks(sub.id))
        assert (task.status.value, task.runs, task.result) == ("completed", 2, "rested")
        (step,) = task.steps
        assert (step.name, step.run) == ("fx.wait/1", 1)  # recorded by the killed run
    finally:
        store.close()
    assert (world / "effects.log").read_text().split() == ["napped"]
