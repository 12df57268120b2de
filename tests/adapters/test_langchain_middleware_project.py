"""``examples/langchain_project/ops_graph.py`` as a user runs it: the project copied into an
empty directory with the built wheel installed with its extras (LangChain from the index), and
the README's ``create_agent`` + ``DurableMiddleware`` commands run verbatim: the first is
SIGKILLed mid-deploy, the second recovers it with the deploy settled as unknown, never run
again, and ``fxdurable check`` is clean (the check of the other framework projects,
``tests/examples/test_framework_projects.py``). The same venv as the other framework projects'."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import user_project
from test_framework_projects import killed_deploy_is_not_repeated
from wheel_support import ALL_EXTRAS

TEST_ID = (
    "tests/adapters/test_langchain_middleware_project.py"
    "::test_the_graph_form_is_not_repeated_either"
)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_graph_form_is_not_repeated_either(tmp_path: Path) -> None:
    killed_deploy_is_not_repeated(user_project("langchain_project", tmp_path, ALL_EXTRAS), TEST_ID)
