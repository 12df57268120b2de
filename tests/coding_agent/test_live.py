"""Opt-in (``FXD_LIVE_TESTS=1``): the coding agent with a real model, chosen as
``make coding-demo`` chooses it (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, or
``OPENAI_BASE_URL`` with ``FXD_CODING_MODEL``). It fixes the project; killed after its first
edit ran, it finishes on the next run without applying that edit twice. Costs tokens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from coding_support import RUN, audit, project_tests_pass

from examples.coding_agent.agent import model_from_env

LIVE_TIMEOUT_S = 600


def live(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """run.py with this environment's model (keys kept; only a stray crash point removed)."""
    env = {k: v for k, v in os.environ.items() if k != "FXD_CRASH_AT"}
    return subprocess.run(
        [sys.executable, str(RUN), "--dir", str(where), "--yes", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=LIVE_TIMEOUT_S,
    )


@pytest.fixture(autouse=True)
def _a_real_model() -> None:
    assert model_from_env() is not None, (
        "FXD_LIVE_TESTS=1 runs a real model: set OPENAI_API_KEY, ANTHROPIC_API_KEY, or "
        "OPENAI_BASE_URL with FXD_CODING_MODEL"
    )


@pytest.mark.timeout(LIVE_TIMEOUT_S + 60)
def test_a_real_model_fixes_the_failing_tests(tmp_path: Path) -> None:
    where = tmp_path / ".fxd-coding"
    done = live(where)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "model: scripted" not in done.stdout
    assert project_tests_pass(where)
    audit(where)


@pytest.mark.timeout(2 * LIVE_TIMEOUT_S + 60)
def test_a_real_model_killed_after_an_edit_finishes_on_the_next_run(tmp_path: Path) -> None:
    where = tmp_path / ".fxd-coding"
    crashed = live(where, "--crash-at", "tool.after-execute:edit_file")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout[-4000:] + crashed.stderr[-2000:]
    done = live(where)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Recovering session 'coder'" in done.stdout
    # An edit applied twice (``unit_price * qty * qty``) would fail the project's tests.
    assert project_tests_pass(where)
    audit(where)
