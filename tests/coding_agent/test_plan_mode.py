"""Plan mode as the page's permission hook decides it (``page_permissions``), call by call: on,
every tool that can change the workspace is refused (``edit_file`` and ``write_file`` as well
as the ``shell`` the scripted model tries first, which the browser test sees) and the plan
is put to the person; off, the edits run and ``exit_plan_mode`` is refused. The hook reads
the session's choice from the settings file, so a choice made between two calls is seen at
the next one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fxdurable as fx
from examples.coding_agent.agent import CHANGING_TOOLS, page_permissions
from examples.coding_agent.settings import SessionSettings
from examples.coding_agent.task import PLAN_MODE_DENIAL
from examples.coding_agent.tools import EXIT_PLAN_MODE
from fxdurable.core.states import ToolTaskStatus

SESSION = "dev/plan"
EDIT = json.dumps({"path": "shop/cart.py", "old_text": "a", "new_text": "b"})
WRITE = json.dumps({"path": "notes.txt", "content": "x"})


def verdict(settings: SessionSettings, tool: str, arguments: str) -> str | fx.Ask | None:
    call = fx.ToolCall(
        tool=tool,
        arguments=arguments,
        task_id="t0",
        execution_id="e0",
        status=ToolTaskStatus.PENDING,
        session_id=SESSION,
    )
    return page_permissions(settings)(tool, arguments, call)


@pytest.fixture
def settings(tmp_path: Path) -> SessionSettings:
    return SessionSettings(tmp_path / "settings.db")


@pytest.mark.parametrize(("tool", "arguments"), [("edit_file", EDIT), ("write_file", WRITE)])
def test_plan_mode_refuses_a_write_until_it_is_off(settings, tool, arguments):
    assert tool in CHANGING_TOOLS
    assert verdict(settings, tool, arguments) is None  # off (the default): the edit runs
    settings.set_plan_mode(SESSION, True)
    refused = verdict(settings, tool, arguments)
    assert refused == PLAN_MODE_DENIAL, refused
    assert verdict(settings, "read_file", json.dumps({"path": "shop/cart.py"})) is None
    settings.set_plan_mode(SESSION, False)  # what approving the plan does
    assert verdict(settings, tool, arguments) is None


def test_the_plan_is_put_to_the_person_only_in_plan_mode(settings):
    plan = json.dumps({"plan": "1. Run the tests\n2. Fix the cart"})
    assert verdict(settings, EXIT_PLAN_MODE, plan) == "plan mode is off: carry on with the task"
    settings.set_plan_mode(SESSION, True)
    asked = verdict(settings, EXIT_PLAN_MODE, plan)
    assert isinstance(asked, fx.Ask)
    assert asked.question == "Approve this plan?\n\n1. Run the tests\n2. Fix the cart"
