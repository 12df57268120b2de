"""The framework example projects as a user runs them: ``examples/pydantic_ai_project``,
``examples/langchain_project`` and ``examples/openai_agents_project``, each copied into an empty
directory with the built wheel installed with its extra (the framework from the index), and its
README's commands run verbatim: the first is SIGKILLed mid-deploy, the second recovers it. The
three share one venv (``wheel_support.ALL_EXTRAS``, the packaging test's too): in one run of the
suite it is made once."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import copy_example, ok, readme_block, run_line, user_env
from wheel_support import ALL_EXTRAS, wheel_venv

TEST_ID = "tests/examples/test_framework_projects.py::test_a_killed_deploy_is_not_repeated"
PROJECTS = ["pydantic_ai_project", "langchain_project", "openai_agents_project"]

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
@pytest.mark.parametrize("example", PROJECTS)
def test_a_killed_deploy_is_not_repeated(tmp_path: Path, example: str) -> None:
    project = copy_example(example, tmp_path)
    env = user_env(wheel_venv(ALL_EXTRAS))
    crash, again, cat, check = readme_block(example, TEST_ID)
    killed = run_line(crash, cwd=project, env=env)
    assert killed.killed and "crash injected at tool.after-execute:deploy" in killed.stderr, killed
    assert ok(run_line(again, cwd=project, env=env)).splitlines()[-1] == (
        "completed: The interrupted deploy of r1 did go out; not repeated."
    )
    (line,) = ok(run_line(cat, cwd=project, env=env)).splitlines()  # deployed once
    assert line.startswith("r1 x"), line
    assert "every invariant holds" in ok(run_line(check, cwd=project, env=env))
