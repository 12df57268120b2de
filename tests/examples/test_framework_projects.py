"""The framework example projects as a user runs them: ``examples/pydantic_ai_project``,
``examples/langchain_project`` and ``examples/openai_agents_project``, each copied into an empty
directory with the built wheel installed with its extra (the framework from the index), and its
README's commands run verbatim: the first is SIGKILLed mid-deploy, the second recovers it. The
three share one venv (``wheel_support.ALL_EXTRAS``, the packaging test's too): in one run of the
suite it is made once. ``killed_deploy_is_not_repeated`` is also the check of LangChain's graph
form (``tests/adapters/test_langchain_middleware_project.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import UserProject, user_project
from wheel_support import ALL_EXTRAS

TEST_ID = "tests/examples/test_framework_projects.py::test_a_killed_deploy_is_not_repeated"
PROJECTS = ["pydantic_ai_project", "langchain_project", "openai_agents_project"]

pytestmark = pytest.mark.slow


def killed_deploy_is_not_repeated(project: UserProject, test_id: str) -> None:
    """The README block of ``test_id``: a run SIGKILLed right after its deploy, the rerun that
    settles it without deploying again, the one deploy in the log, a clean ``fxdurable check``."""
    crash, again, cat, check = project.commands(test_id)
    killed = project.run(crash)
    assert killed.killed and "crash injected at tool.after-execute:deploy" in killed.stderr, killed
    assert project.ok(again).splitlines()[-1] == (
        "completed: The interrupted deploy of r1 did go out; not repeated."
    )
    (line,) = project.ok(cat).splitlines()  # deployed once
    assert line.startswith("r1 x"), line
    assert "every invariant holds" in project.ok(check)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("example", PROJECTS)
def test_a_killed_deploy_is_not_repeated(tmp_path: Path, example: str) -> None:
    killed_deploy_is_not_repeated(user_project(example, tmp_path, ALL_EXTRAS), TEST_ID)
