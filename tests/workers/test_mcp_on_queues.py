"""MCP tools (``fx.mcp_tools`` over a stdio server the worker starts: ``tests/mcp/mcp_server.py``)
in real ``fxdurable worker`` processes killed at the issue's crash points, on RQ (the Redis
store) and on SQS (DynamoDB + S3 on moto): after recovery the deploy happened at most once, an
interrupted deploy is ``outcome_unknown`` and the model read so, and ``fxdurable check`` is
clean. The MCP boundary's two points run on both queues; the model's and the commit's on one
each (the embedded runs of ``tests/mcp/test_mcp_crash.py`` cover the rest)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_story_agents import CRASH_MARK
from rq_support import RqHarness, wait_until
from sqs_support import SqsHarness
from worker_support import parse_worker_pid

from fxdurable.backends import open_store
from fxdurable.testing import Effect, check_effects, check_store
from tests.mcp.mcp_support import check, lines
from tests.mcp.mcp_worker_agents import stand_in

MCP = Path(__file__).resolve().parents[1] / "mcp"
UNKNOWN = "may or may not have completed"  # in fxdurable's unknown-outcome message

pytestmark = [pytest.mark.crash, pytest.mark.slow]

SESSION = "s"
LEASE_TTL_S = 30.0  # recovery must not wait for it: the dead worker's pid is gone
# crash point -> deploys the server saw (at most one)
DEPLOYS = {
    "model.mid-stream": 1,
    "tool.after-intent:deploy": 0,
    "tool.after-execute:deploy": 1,
    "turn.in-commit": 1,
}
RQ_POINTS = ["model.mid-stream", "tool.after-intent:deploy", "tool.after-execute:deploy"]
SQS_POINTS = ["tool.after-intent:deploy", "tool.after-execute:deploy", "turn.in-commit"]


def assert_checked(store: str, world: Path) -> None:
    """The store's invariants hold, the server's deploys against the records (one per
    execution id, each a recorded call), and ``fxdurable check --at-rest`` says so."""
    deployed = [Effect("deploy", line.split()[2]) for line in lines(world, "effects.log")]
    opened = open_store(store)
    try:
        summary = opened.read(lambda v: check_store(v, now=time.time(), at_rest=True))
        violations = opened.read(lambda v: check_effects(v, deployed))
    finally:
        opened.close()
    assert not summary.violations and not violations, (summary.violations, violations)
    code, out = check(store)
    assert code == 0 and "every invariant holds" in out, out


def assert_recovered(h: RqHarness | SqsHarness, spec: str, result: str | None) -> None:
    assert result == "done", result
    assert len(lines(h.world_dir, "effects.log")) == DEPLOYS[spec]  # never sent again
    deploys = [line for line in lines(h.world_dir, "calls.log") if line.startswith("deploy ")]
    assert len(deploys) == DEPLOYS[spec], deploys
    (sub,) = h.read(lambda v: list(v.submissions(SESSION)))
    (task,) = h.read(lambda v: list(v.tool_tasks(sub.id)))
    # What the model read as the deploy's result (the history is rebuilt from it).
    results = [
        str(e.data.get("result", ""))
        for e in h.read(lambda v: list(v.events(SESSION)))
        if e.type.startswith("tool.") and e.data.get("tool") == "deploy"
    ]
    told = [r for r in results if UNKNOWN in r]
    if spec.endswith(":deploy"):
        assert task.status == "outcome_unknown", task
        assert told, "the model was not told the deploy's outcome is unknown"
    else:
        assert task.status == "completed" and not told, (task, told)
    assert_checked(h.store_url, h.world_dir)


@pytest.mark.redis
@pytest.mark.parametrize("store_url", ["redis"], indirect=True)
@pytest.mark.parametrize("spec", RQ_POINTS)
def test_a_killed_horse_calling_an_mcp_tool_is_recovered(
    make_harness: Callable[..., RqHarness], spec: str
) -> None:
    h = make_harness(lease_ttl_s=LEASE_TTL_S)
    h.use_agents(MCP / "mcp_worker_agents.py", lambda: [stand_in()])
    worker = h.start_worker(crash_plan=[spec])
    sub_id = h.submit_one(SESSION, "deploy please", "mcp-1")
    wait_until(lambda: CRASH_MARK in worker.log(), 40, f"the crash at {spec}", poll_s=0.005)
    (sub,) = h.wait_settled([sub_id], timeout=40)
    assert sub.status == "completed", (sub, h.diagnostics())
    assert f"crash injected at {spec}" in worker.log(), worker.log()
    assert h.stop_workers() == [0], h.diagnostics()
    assert len(h.read(lambda v: list(v.attempts(sub_id)))) == 2  # the killed one, the recovery
    assert_recovered(h, spec, sub.result_text)


@pytest.mark.aws
@pytest.mark.parametrize("spec", SQS_POINTS)
def test_a_killed_sqs_worker_calling_an_mcp_tool_is_recovered(
    make_sqs_harness: Callable[..., SqsHarness], spec: str
) -> None:
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S)
    h.use_agents(MCP / "mcp_worker_agents.py", lambda: [stand_in()])
    sub_id = h.submit_one(SESSION, "deploy please", "mcp-1")
    doomed = h.start_worker(env={"FXD_CRASH_AT": spec}, scan_interval_s=0)
    assert doomed.proc.wait(timeout=40) == -signal.SIGKILL, doomed.log()
    assert f"crash injected at {spec}" in doomed.log(), doomed.log()
    h.start_worker(scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=40)
    assert sub.status == "completed", (sub, h.diagnostics())
    assert h.stop_workers() == [0], h.diagnostics()
    attempts = h.read(lambda v: list(v.attempts(sub_id)))
    assert parse_worker_pid(attempts[0].worker) == doomed.pid, attempts
    assert_recovered(h, spec, sub.result_text)
    assert h.depth() == 0
