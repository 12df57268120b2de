"""The wake handler in a real subprocess (``wake_driver.py``: Lambda's SQS poller in
miniature, with a context whose remaining time is 2 s) against a moto queue and a SQLite
file or a DynamoDB table (on the serial moto server: see LambdaWorld.create): a 3-tool turn
spans several invocations and completes; a SIGKILL mid-tool is recovered by SQS redelivery,
with the unsafe call ``outcome_unknown`` (DESIGN §3.5, §5)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lambda_support import DUMMY_AWS, HERE, REPO, LambdaWorld

from tests.kit.story import STORY_REQUEST, done_text, read_lines
from tests.kit.world import assert_invariants, read_world

pytestmark = [pytest.mark.crash, pytest.mark.slow]

# The template's store (a DynamoDB table with S3 offload, on moto) and the embedded one.
STORES = ["sqlite", "dynamodb"]

SESSION = "lambda-story"
DRIVER = HERE / "wake_driver.py"
REMAINING_S = "2"
# Stop with 1.5 s left: one model step and one 0.6 s tool fit in each 2 s invocation.
TIMING = {"FXD_LAMBDA_MARGIN_S": "1.5", "FXD_LEASE_TTL_S": "1.5", "FXD_HEARTBEAT_S": "0.3"}
RUN_TIMEOUT_S = 120.0


def _driver() -> list[str]:
    return [sys.executable, str(DRIVER), SESSION, REMAINING_S]


def _run(world: LambdaWorld, **env: str) -> list[dict]:
    done = subprocess.run(
        _driver(),
        cwd=REPO,
        env=world.subprocess_env(**TIMING, **env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads the store too (a DynamoDB one through boto3's usual chain)."""
    for name, value in DUMMY_AWS.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("store", STORES)
def test_a_three_tool_turn_spans_several_invocations_and_completes(
    moto_server: str, serial_moto_server: str, tmp_path: Path, store: str
) -> None:
    world = LambdaWorld.create(
        moto_server, tmp_path, store=store, table_endpoint_url=serial_moto_server
    )
    try:
        world.admit(SESSION, "story m", STORY_REQUEST)
        invocations = _run(world, FXD_TEST_TOOL_S="0.6")
        state = read_world(world.store_url, world.world_dir)
        offloaded = world.offloaded()
    finally:
        world.close()
    assert_invariants(state, [STORY_REQUEST], sessions=1)
    sub = state.submission()
    assert sub.status == "completed" and sub.result_text == done_text("m", "m")
    # Each invocation stopped at a step boundary and handed the rest on: one attempt each.
    attempts = state.attempts[sub.id]
    assert len(attempts) >= 3, (attempts, invocations)
    assert len([i for i in invocations if i["failed"] == 0]) >= len(attempts)
    # One warm sandbox ran them all, and every tool ran exactly once.
    assert set(state.attempt_pids()) == {state.calls[0][3]}
    assert [name for name, *_ in state.calls] == ["read_state", "charge", "deploy"]
    assert (offloaded > 0) is (store == "dynamodb")  # records went through S3 as well


@pytest.mark.parametrize("store", STORES)
def test_a_sigkill_mid_tool_is_recovered_by_redelivery_with_the_unsafe_call_unknown(
    moto_server: str, serial_moto_server: str, tmp_path: Path, store: str
) -> None:
    # The visibility timeout outlasts the longest invocation plus the lease TTL, as the
    # template's (6x the function's timeout) does: the message comes back to a free lease.
    world = LambdaWorld.create(
        moto_server,
        tmp_path,
        visibility_s=8,
        store=store,
        table_endpoint_url=serial_moto_server,
    )
    calls = world.world_dir / "calls.log"
    try:
        world.admit(SESSION, "story k", STORY_REQUEST)
        slow_deploy = {"FXD_TEST_TOOL_S": "0.3", "FXD_TEST_DEPLOY_S": "30"}
        first = subprocess.Popen(
            _driver(),
            cwd=REPO,
            env=world.subprocess_env(**TIMING, **slow_deploy),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not any(line.startswith("deploy ") for line in read_lines(calls)):
                assert first.poll() is None, first.communicate()
                assert time.monotonic() < deadline, "deploy never started"
                time.sleep(0.02)
            first.send_signal(signal.SIGKILL)  # mid-deploy: no cleanup, like a Lambda timeout
        finally:
            first.kill()
            first.communicate()
        assert first.returncode == -signal.SIGKILL
        invocations = _run(world, **slow_deploy)
        state = read_world(world.store_url, world.world_dir)
    finally:
        world.close()
    # The killed invocation's messages came back (a second receive) and recovered the turn.
    assert max(max(i["receive_counts"]) for i in invocations) >= 2, invocations
    assert_invariants(state, [STORY_REQUEST], sessions=1)
    deploy = state.task("deploy")
    assert deploy.status == "outcome_unknown" and state.effects_of("deploy") == []
    assert state.calls_of("deploy") == [(deploy.execution_id, 1)]  # never run again
    sub = state.submission()
    assert sub.status == "completed" and "I will not deploy again" in (sub.result_text or "")
    # The model was told the outcome is unknown, and inspected instead of deploying again.
    assert len(state.task_events(deploy, "tool.outcome_unknown")) == 1
    assert len(state.calls_of("check_deploy")) == 1
