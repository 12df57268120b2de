"""The adapters' crash matrix (``tests/adapters/pydai_checks.py``) in real ``fxdurable worker``
processes on RQ: pydantic-ai's whole matrix on each worker store (SQLite, Redis), and the OpenAI
Agents SDK and LangChain agents at the issue's crash points on the Redis store, spread with
``test_sqs_pydantic_ai.py`` (``tests/adapters/frameworks.py``: ``SPREAD``), and at one point
each on the SQLite store. Each agent is an
ordinary framework agent served by the workers' agents module
``tests/adapters/pydai_rq_agents.py``. A horse SIGKILLs itself at the point once; the surviving
RQ parent's reconciliation recovers the session in a new horse; then a fresh worker answers a
follow-up."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_story_agents import CRASH_MARK
from rq_support import RqHarness, parse_worker_pid, wait_until

import fxdurable as fx

ADAPTERS = Path(__file__).resolve().parents[1] / "adapters"
if str(ADAPTERS) not in sys.path:
    sys.path.insert(0, str(ADAPTERS))

from frameworks import ENV, build, spread  # noqa: E402
from pydai_checks import MATRIX, assert_checked, assert_followed_up, assert_recovered  # noqa: E402

pytestmark = [pytest.mark.redis, pytest.mark.crash, pytest.mark.slow]

SESSION = "s"
LEASE_TTL_S = 30.0  # recovery must not wait for it: the dead horse's pid is gone
OTHERS = spread("rq", MATRIX)
ON_SQLITE = spread("rq-sqlite", MATRIX)


def run_killed_horse(
    make_harness: Callable[..., RqHarness] | RqHarness,
    framework: str,
    spec: str,
    deploys: int,
    unknown: bool,
    *,
    agents: tuple[Path, Callable[[Path], fx.Agent], dict[str, str]] | None = None,
) -> None:
    """``framework``'s agent (or ``agents``: the workers' agents module, the builder of its
    agent for this process, the workers' environment) in an RQ worker whose horse dies at
    ``spec``: recovered by the RQ parent, checked, then a follow-up in a fresh worker."""
    h = (
        make_harness
        if isinstance(make_harness, RqHarness)
        else make_harness(lease_ttl_s=LEASE_TTL_S)
    )
    source, make, env = agents or (
        ADAPTERS / "pydai_rq_agents.py",
        lambda world: build(framework, world),
        {ENV: framework},
    )
    h.use_agents(source, lambda: [make(h.world_dir)], env)
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
    assert_followed_up(h, SESSION, deploys=deploys)


@pytest.mark.parametrize(("spec", "deploys", "unknown"), MATRIX, ids=[m[0] for m in MATRIX])
def test_a_killed_horse_running_a_pydantic_ai_turn_is_recovered(
    make_harness: Callable[..., RqHarness], spec: str, deploys: int, unknown: bool
) -> None:
    run_killed_horse(make_harness, "pydantic-ai", spec, deploys, unknown)


@pytest.mark.parametrize("store_url", ["redis"], indirect=True)
@pytest.mark.parametrize(
    ("framework", "spec", "deploys", "unknown"), OTHERS, ids=[f"{o[0]}-{o[1]}" for o in OTHERS]
)
def test_a_killed_horse_running_an_agents_sdk_or_langchain_turn_is_recovered(
    make_harness: Callable[..., RqHarness], framework: str, spec: str, deploys: int, unknown: bool
) -> None:
    run_killed_horse(make_harness, framework, spec, deploys, unknown)


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("framework", "spec", "deploys", "unknown"),
    ON_SQLITE,
    ids=[f"{o[0]}-{o[1]}" for o in ON_SQLITE],
)
def test_a_killed_horse_on_the_sqlite_store_running_an_sdk_or_langchain_turn_is_recovered(
    make_harness: Callable[..., RqHarness], framework: str, spec: str, deploys: int, unknown: bool
) -> None:
    run_killed_horse(make_harness, framework, spec, deploys, unknown)
