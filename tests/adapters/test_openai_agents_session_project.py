"""``examples/openai_agents_project/memory.py`` as a user runs it: the project copied into an
empty directory with the built wheel installed with its extras (the Agents SDK from the index),
the README's commands run verbatim: a turn, then ``DurableSession`` reading it as SDK items
from the store in another process, its write refused. The same venv as the other framework
projects'."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import user_project
from wheel_support import ALL_EXTRAS

TEST_ID = (
    "tests/adapters/test_openai_agents_session_project.py"
    "::test_the_sdk_session_reads_the_durable_turns"
)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_sdk_session_reads_the_durable_turns(tmp_path: Path) -> None:
    project = user_project("openai_agents_project", tmp_path, ALL_EXTRAS)
    turn, memory = project.commands(TEST_ID)
    assert project.ok(turn).splitlines()[-1] == "completed: Deployed r1."
    assert project.ok(memory).splitlines() == [
        "user: Deploy r1.",
        "function_call read_status",
        "function_call_output c0: eu: healthy",
        "function_call deploy",
        "function_call_output c1: r1 deployed",
        "assistant: Deployed r1.",
        "refused: SessionReadOnlyError",
    ]
