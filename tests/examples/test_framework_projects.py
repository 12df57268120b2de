"""``examples/pydantic_ai_project`` as a user runs it: copied into an empty directory, the
built wheel installed with the ``pydantic-ai`` extra (pydantic-ai-slim from the index), and its
README's commands run verbatim: the first is SIGKILLed mid-deploy, the second recovers it."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import copy_example, ok, readme_block, run_line, user_env
from wheel_support import wheel_venv

EXAMPLE = "pydantic_ai_project"
TEST_ID = "tests/examples/test_pydantic_ai_project.py::test_a_killed_deploy_is_not_repeated"

pytestmark = pytest.mark.slow


def test_a_killed_deploy_is_not_repeated(tmp_path: Path) -> None:
    project = copy_example(EXAMPLE, tmp_path)
    env = user_env(wheel_venv("pydantic-ai"))
    crash, again, cat, check = readme_block(EXAMPLE, TEST_ID)
    killed = run_line(crash, cwd=project, env=env)
    assert killed.killed and "crash injected at tool.after-execute:deploy" in killed.stderr, killed
    assert ok(run_line(again, cwd=project, env=env)).splitlines()[-1] == (
        "completed: The interrupted deploy of r1 did go out; not repeated."
    )
    (line,) = ok(run_line(cat, cwd=project, env=env)).splitlines()  # deployed once
    assert line.startswith("r1 x"), line
    assert "every invariant holds" in ok(run_line(check, cwd=project, env=env))
