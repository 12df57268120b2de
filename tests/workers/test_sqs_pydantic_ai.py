"""The pydantic-ai adapter's crash matrix (``tests/adapters/pydai_checks.py``) on SQS workers
(the store is the SQS suites' default, DynamoDB + S3 on moto): a worker started with
``FXD_CRASH_AT`` dies at the point; a survivor (scan off) recovers the session from the
redelivered wake, then answers a follow-up. The agent is the ordinary ``pydantic_ai.Agent``
of ``tests/adapters/pydai_agent.py``, served by ``tests/adapters/pydai_rq_agents.py``."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqs_support import SqsHarness
from worker_support import parse_worker_pid

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))

from pydai_agent import build  # noqa: E402
from pydai_checks import MATRIX, assert_checked, assert_recovered, lines  # noqa: E402

pytestmark = [pytest.mark.aws, pytest.mark.crash, pytest.mark.slow]

SESSION = "s"
LEASE_TTL_S = 30.0  # recovery must not wait for it: the dead worker's pid is gone


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[m[0] for m in MATRIX])
def test_a_killed_sqs_worker_running_a_pydantic_ai_turn_is_recovered(
    make_sqs_harness: Callable[..., SqsHarness], spec: str, deploys: int, unknown: bool
) -> None:
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S)
    h.use_agents(ADAPTERS / "pydai_rq_agents.py", lambda: [build(h.world_dir)])
    sub_id = h.submit_one(SESSION, "deploy r1", "pa-1")
    doomed = h.start_worker(env={"FXD_CRASH_AT": spec}, scan_interval_s=0)
    assert doomed.proc.wait(timeout=40) == -signal.SIGKILL, doomed.log()
    assert f"crash injected at {spec}" in doomed.log(), doomed.log()
    h.start_worker(scan_interval_s=0)
    (sub,) = h.wait_settled([sub_id], timeout=40)
    assert sub.status == "completed", (sub, h.diagnostics())
    attempts = h.read(lambda v: list(v.attempts(sub_id)))
    assert parse_worker_pid(attempts[0].worker) == doomed.pid, attempts
    assert_recovered(
        h.world_dir,
        spec,
        deploys=deploys,
        unknown=unknown,
        text=sub.result_text,
        crashed_pid=doomed.pid,
    )
    nxt = h.submit_one(SESSION, "status?", "pa-2")
    (done,) = h.wait_settled([nxt], timeout=30)
    assert h.stop_workers() == [0], h.diagnostics()
    assert (done.status, done.result_text) == ("completed", "status: eu: healthy")
    assert len(lines(h.world_dir / "effects.log")) == deploys
    assert_checked(h.store_url, h.world_dir)
    assert h.depth() == 0
