"""``examples/openai_agents_project/memory.py`` as a user runs it: the project copied into an
empty directory with the built wheel installed with its extras (the Agents SDK from the index),
the README's commands run verbatim: a turn, then ``DurableSession`` reading it as SDK items
from the store in another process, its write refused. The same venv as the other framework
projects'."""

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
    "tests/adapters/test_openai_agents_session_project.py"
    "::test_the_sdk_session_reads_the_durable_turns"
)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_sdk_session_reads_the_durable_turns(tmp_path: Path) -> None:
    project = copy_example("openai_agents_project", tmp_path)
    env = user_env(wheel_venv(ALL_EXTRAS))
    turn, memory = readme_block("openai_agents_project", TEST_ID)
    assert ok(run_line(turn, cwd=project, env=env)).splitlines()[-1] == "completed: Deployed r1."
    assert ok(run_line(memory, cwd=project, env=env)).splitlines() == [
        "user: Deploy r1.",
        "function_call read_status",
        "function_call_output c0: eu: healthy",
        "function_call deploy",
        "function_call_output c1: r1 deployed",
        "assistant: Deployed r1.",
        "refused: SessionReadOnlyError",
    ]
