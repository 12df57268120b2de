"""A pydantic-ai agent's turn (``tests/adapters/pydai_agent.py``: read, note, deploy) run by
the real Lambda wake handler (``wake_driver.py``: the SQS poller in miniature, each
invocation given 8 s) on a moto queue and a SQLite store: the turn completes, its tools each
run once, and the store checks clean. Its tools are instant, so it fits in one invocation
(6.5 s before the margin: with 2 s, half a second of work, a loaded CI machine ran it in two);
turns spanning invocations are the story agent's (``test_wake_lambda_invocations.py``): the
runtime's deadline handling does not depend on the agent's framework."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lambda_support import DUMMY_AWS, HERE, REPO, LambdaWorld

ADAPTERS = REPO / "tests" / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))

from pydai_checks import assert_checked, lines  # noqa: E402

pytestmark = [pytest.mark.crash, pytest.mark.slow]

SESSION = "s"
# The Lambda tests' timing (test_wake_lambda_invocations.py).
TIMING = {"FXD_LAMBDA_MARGIN_S": "1.5", "FXD_LEASE_TTL_S": "1.5", "FXD_HEARTBEAT_S": "0.3"}
INVOCATION_S = 8


def test_a_pydantic_ai_turn_is_run_to_completion_by_the_wake_handler(
    moto_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in DUMMY_AWS.items():  # this process reads the store too
        monkeypatch.setenv(name, value)
    world = LambdaWorld.create(moto_server, tmp_path)
    try:
        sub_id = world.admit(SESSION, "deploy r1", "pa-1", agent="pydai-ops")
        env = world.subprocess_env(**TIMING, FXD_AGENTS="tests.adapters.pydai_lambda_agents:agents")
        done = subprocess.run(
            [sys.executable, str(HERE / "wake_driver.py"), SESSION, str(INVOCATION_S)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}"
        invocations = [json.loads(line) for line in done.stdout.splitlines()]
        store = world.store_url
        record = world.session(SESSION)
    finally:
        world.close()
    assert record is not None
    from fxdurable.backends import open_store

    opened = open_store(store)
    try:
        sub = opened.read(lambda v: v.get_submission(sub_id))
        attempts = opened.read(lambda v: list(v.attempts(sub_id)))
        tasks = opened.read(lambda v: list(v.session_tool_tasks(SESSION)))
    finally:
        opened.close()
    assert sub is not None and sub.status == "completed", sub
    assert (sub.result_text or "").startswith("deployed: release r1 deployed"), sub.result_text
    assert len(attempts) == 1 and invocations[-1]["failed"] == 0, (attempts, invocations)
    assert [t.tool for t in tasks] == ["read_status", "record_note", "deploy"]
    assert all(t.status == "completed" for t in tasks), tasks
    assert len(lines(world.world_dir / "effects.log")) == 1  # the deploy once
    assert_checked(store, world.world_dir)
