"""``examples/langchain_project/ops_graph.py`` as a user runs it: the project copied into an
empty directory with the built wheel installed with its extras (LangChain from the index), and
the README's ``create_agent`` + ``DurableMiddleware`` commands run verbatim: the first is
SIGKILLed mid-deploy, the second recovers it with the deploy settled as unknown, never run
again, and ``fxdurable check`` is clean. The same venv as the other framework projects'."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXAMPLES = str(Path(__file__).resolve().parents[1] / "examples")
if EXAMPLES not in sys.path:  # examples_support lives beside the example tests
    sys.path.insert(0, EXAMPLES)

from examples_support import copy_example, ok, readme_block, run_line, user_env  # noqa: E402
from wheel_support import ALL_EXTRAS, wheel_venv  # noqa: E402

TEST_ID = (
    "tests/adapters/test_langchain_middleware_project.py"
    "::test_the_graph_form_is_not_repeated_either"
)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_graph_form_is_not_repeated_either(tmp_path: Path) -> None:
    project = copy_example("langchain_project", tmp_path)
    env = user_env(wheel_venv(ALL_EXTRAS))
    crash, again, cat, check = readme_block("langchain_project", TEST_ID)
    killed = run_line(crash, cwd=project, env=env)
    assert killed.killed and "crash injected at tool.after-execute:deploy" in killed.stderr, killed
    assert ok(run_line(again, cwd=project, env=env)).splitlines()[-1] == (
        "completed: The interrupted deploy of r1 did go out; not repeated."
    )
    (line,) = ok(run_line(cat, cwd=project, env=env)).splitlines()  # deployed once
    assert line.startswith("r1 x"), line
    assert "every invariant holds" in ok(run_line(check, cwd=project, env=env))
