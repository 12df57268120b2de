"""``examples/mcp_project`` as a user runs it: copied into an empty directory, the wheel
installed with the ``mcp`` extra, its README's commands run verbatim there: a deploy over a
stdio MCP server, a SIGKILL right after the server deployed, the rerun that does not deploy
again."""

from __future__ import annotations

from pathlib import Path

import pytest
from examples_support import copy_example, ok, readme_block, run_line, user_env
from wheel_support import wheel_venv

EXAMPLE = "mcp_project"
TEST_ID = "tests/examples/test_mcp_project.py::test_a_deploy_killed_mid_call_is_not_repeated"

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_a_deploy_killed_mid_call_is_not_repeated(tmp_path: Path) -> None:
    project = copy_example(EXAMPLE, tmp_path)
    env = user_env(wheel_venv("mcp"))
    first, crash, again, show, check = readme_block(EXAMPLE, TEST_ID)
    assert "completed: deployed v2." in ok(run_line(first, cwd=project, env=env))
    killed = run_line(crash, cwd=project, env=env)
    assert killed.killed, (killed.returncode, killed.stdout, killed.stderr)
    assert "crash injected at tool.after-execute:deploy" in killed.stderr
    out = ok(run_line(again, cwd=project, env=env))
    assert "completed: v3 did go out before the interruption; not deploying again." in out
    deployed = [
        line.split("\t")[0] for line in ok(run_line(show, cwd=project, env=env)).split("\n") if line
    ]
    assert deployed == ["v2", "v3"]  # v3 once: never sent again
    assert "every invariant holds" in ok(run_line(check, cwd=project, env=env))
