"""The pydantic-ai adapter's crash matrix (``tests/adapters/pydai_checks.py``) in real
``fxdurable worker`` processes on RQ, on each worker store (SQLite, Redis): the agent is an
ordinary ``pydantic_ai.Agent`` (``tests/adapters/pydai_agent.py``) served by the workers'
agents module ``tests/adapters/pydai_rq_agents.py``. A horse SIGKILLs itself at the point
once; the surviving RQ parent's reconciliation recovers the session in a new horse; then a
fresh worker answers a follow-up."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_story_agents import CRASH_MARK
from rq_support import RqHarness, parse_worker_pid, wait_until

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))

from pydai_agent import build  # noqa: E402
from pydai_checks import MATRIX, assert_checked, assert_recovered, lines  # noqa: E402

pytestmark = [pytest.mark.redis, pytest.mark.crash, pytest.mark.slow]

SESSION = "s"
LEASE_TTL_S = 30.0  # recovery must not wait for it: the dead horse's pid is gone


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[m[0] for m in MATRIX])
def test_a_killed_horse_running_a_pydantic_ai_turn_is_recovered(
    make_harness: Callable[..., RqHarness], spec: str, deploys: int, unknown: bool
) -> None:
    h = make_harness(lease_ttl_s=LEASE_TTL_S)
    h.use_agents(ADAPTERS / "pydai_rq_agents.py", lambda: [build(h.world_dir)])
    worker = h.start_worker(crash_plan=[spec])
    sub_id = h.submit_one(SESSION, "deploy r1", "pa-1")
    wait_until(lambda: CRASH_MARK in worker.log(), 40, f"the crash at {spec}", poll_s=0.005)
    (sub,) = h.wait_settled([sub_id], timeout=40)
    assert sub.status == "completed", (sub, h.diagnostics())
    log = worker.log()
    assert worker.alive() and f"crash injected at {spec}" in log, log
    assert h.stop_workers() == [0], h.diagnostics()
    attempts = h.read(lambda v: list(v.attempts(sub_id)))
    assert len(attempts) == 2, attempts  # the killed one and the recovery
    assert_recovered(
        h.world_dir,
        spec,
        deploys=deploys,
        unknown=unknown,
        text=sub.result_text,
        crashed_pid=parse_worker_pid(attempts[0].worker),
    )
    assert_checked(h.store_url, h.world_dir)

    h.start_worker()
    nxt = h.submit_one(SESSION, "status?", "pa-2")
    (done,) = h.wait_settled([nxt], timeout=30)
    assert h.stop_workers() == [0]
    assert (done.status, done.result_text) == ("completed", "status: eu: healthy")
    assert len(lines(h.world_dir / "effects.log")) == deploys
    assert_checked(h.store_url, h.world_dir)
