"""What the coding agent is asked, and the words its scripted policy and its runner share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = [
    "CARRY_ON",
    "CART",
    "EMPTY_CART_STEER",
    "EMPTY_CART_TEST",
    "PLAN_MODE_DENIAL",
    "TASK",
    "TESTS",
    "TEST_COMMAND",
    "run_project_tests",
]

# The project's test command; the runner puts its own interpreter first on PATH, so
# ``python3`` is the one running the demo (the project needs nothing but the stdlib).
TEST_COMMAND = "python3 -m unittest -q"
CART = "shop/cart.py"
TESTS = "tests/test_cart.py"

TASK = (
    f"The tests of this project fail (`{TEST_COMMAND}`). Find out why and fix the code, "
    "not the tests, so that they pass."
)

# A fork's first message: its conversation so far is its source's, up to the fork point.
CARRY_ON = "Carry on with the task from where you are."

# A steering message the scripted policy understands (case-insensitively, on "empty cart").
EMPTY_CART_STEER = "Also add one test for an empty cart."
EMPTY_CART_TEST = "test_empty_cart_total_is_zero"

# What the page's permission hook answers a changing tool in plan mode (the model reads it
# after "denied: "), and what the scripted policy recognises.
PLAN_MODE_DENIAL = (
    "plan mode is on: only reading tools until the user approves your plan; call "
    "exit_plan_mode with it"
)


def run_project_tests(where: Path) -> subprocess.CompletedProcess[str]:
    """The project's tests, run in ``where`` by this interpreter, as a person checking the
    agent's work would (unittest reports on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "unittest", "-q"],
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
    )
