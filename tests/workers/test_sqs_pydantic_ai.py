"""The adapters' crash matrix (``tests/adapters/pydai_checks.py``) on SQS workers (the store is
the SQS suites' default, DynamoDB + S3 on moto): pydantic-ai's whole matrix, and the OpenAI
Agents SDK and LangChain agents at the issue's crash points, spread with
``test_rq_pydantic_ai.py`` (``tests/adapters/frameworks.py``: ``SPREAD``). A worker started
with ``FXD_CRASH_AT`` dies at the point; a survivor (scan off) recovers the session from the
redelivered wake, then answers a follow-up. Each agent is an ordinary framework agent, served
by ``tests/adapters/pydai_rq_agents.py``."""

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

from frameworks import ENV, FRAMEWORKS, build, spread  # noqa: E402
from pydai_checks import MATRIX, assert_followed_up, assert_recovered  # noqa: E402

pytestmark = [pytest.mark.aws, pytest.mark.crash, pytest.mark.slow]

SESSION = "s"
LEASE_TTL_S = 30.0  # recovery must not wait for it: the dead worker's pid is gone
# pydantic-ai's whole matrix, then the other adapters' share of the issue's points
CASES = [(FRAMEWORKS[0], *m) for m in MATRIX] + spread("sqs", MATRIX)


@pytest.mark.parametrize(
    ("framework", "spec", "deploys", "unknown"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_a_killed_sqs_worker_running_a_framework_turn_is_recovered(
    make_sqs_harness: Callable[..., SqsHarness],
    framework: str,
    spec: str,
    deploys: int,
    unknown: bool,
) -> None:
    h = make_sqs_harness(lease_ttl_s=LEASE_TTL_S)
    h.use_agents(
        ADAPTERS / "pydai_rq_agents.py", lambda: [build(framework, h.world_dir)], {ENV: framework}
    )
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
    assert_followed_up(h, SESSION, deploys=deploys)
    assert h.depth() == 0
