"""Permission prompts on RQ (DESIGN §3.11, §5): real ``fxdurable worker`` processes, SIGKILLed.

The workers' story agent asks a person before ``deploy`` (``FXD_TEST_ASK_BEFORE=deploy``:
``tests.kit.story.asking_hook``). A horse is SIGKILLed just before the deploy's hook
(``hook.before-tool:deploy``) or just after the question committed, lease still held
(``input.after-request:deploy``); in another case the whole worker, parent and horse, is
SIGKILLed while the turn waits for its answer. The RQ parent's (or a fresh worker's) scans
then find a turn that waits: nothing runs it, no further attempt starts. The answer
(``session.answer(fx.allow())`` from a process in RQ mode) enqueues the wake; the deploy
happens exactly once, never as ``outcome_unknown``; the question was asked once; the
invariants hold; a next message completes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from crash_cases import REQUEST, SESSION, STORY, assert_story_completed
from rq_story_agents import CRASH_MARK
from rq_support import RqHarness, wait_until
from test_rq_crash_suite import LEASE_TTL_S, follow_up
from worker_support import WorkerHarness

import fxdurable as fx
from tests.kit.story import question_for, read_lines
from tests.kit.world import World, assert_invariants

pytestmark = [pytest.mark.redis, pytest.mark.crash]

ASK = {"FXD_TEST_ASK_BEFORE": "deploy"}


def wait_for_the_question(h: WorkerHarness, sub_id: str) -> None:
    """Until the story waits for its answer with no lease held; then three scan intervals
    (0.5 s each, where scans run) pass without any worker starting an attempt of it."""

    def waiting() -> bool:
        sub = h.read(lambda v: v.get_submission(sub_id))
        session = h.read(lambda v: v.get_session(SESSION))
        return sub.input_request is not None and session.lease.owner is None

    wait_until(waiting, 30, "the story waits for its answer")
    before = len(h.events(SESSION))
    time.sleep(1.6)
    assert len(h.events(SESSION)) == before, [e.type for e in h.events(SESSION)[before:]]


def answer_allow(h: WorkerHarness) -> None:
    """Answer from another process on the workers' queue: the answer's wake goes there."""

    async def go() -> None:
        async with fx.Runtime(h.agents(), store=h.store_url, queue=h.queue_url) as rt:
            answered = await rt.session(SESSION).answer(fx.allow())
            assert not answered.needs_input

    asyncio.run(go())


def assert_deployed_once_after_one_question(h: WorkerHarness, *, interruptions: int) -> World:
    world = h.world()
    assert_invariants(world, [REQUEST])
    assert_story_completed(world, interruptions=interruptions)
    deploy = world.task("deploy", REQUEST)
    assert deploy.runs == 1 and deploy.answer is not None and deploy.answer.kind == "allow"
    assert not world.events_of("tool.outcome_unknown")
    (asked,) = world.events_of("input.requested")
    assert asked.data["question"] == question_for("deploy", deploy.arguments)
    assert len(world.events_of("input.answered")) == 1
    assert read_lines(h.world_dir / "hooks.log").count("deploy") == 1
    return world


@pytest.mark.parametrize(
    ("point", "interruptions"),
    [("hook.before-tool:deploy", 1), ("input.after-request:deploy", 0)],
)
def test_a_horse_killed_around_the_question_asks_it_once(
    make_harness: Callable[..., RqHarness], point: str, interruptions: int
) -> None:
    h = make_harness(lease_ttl_s=LEASE_TTL_S)
    worker = h.start_worker(crash_plan=[point], env=ASK)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    wait_until(lambda: CRASH_MARK in worker.log(), 30, f"the crash at {point}")
    wait_for_the_question(h, sub_id)
    assert h.world().effects_of("deploy") == []
    answer_allow(h)
    h.wait_settled([sub_id], timeout=30)
    assert worker.alive(), worker.log()
    assert h.stop_workers() == [0], h.diagnostics()
    assert_deployed_once_after_one_question(h, interruptions=interruptions)
    follow_up(h)


def test_a_worker_killed_while_the_turn_waits_loses_nothing(
    make_harness: Callable[..., RqHarness],
) -> None:
    """SIGKILL the whole worker (parent and horse) while the turn waits: it held no lease
    and no job of the session. The answer's wake waits in RQ until a fresh worker runs it."""
    h = make_harness(lease_ttl_s=LEASE_TTL_S)
    first = h.start_worker(env=ASK)
    sub_id = h.submit_one(SESSION, STORY, REQUEST)
    wait_for_the_question(h, sub_id)
    first.kill()
    assert not first.alive()
    answer_allow(h)
    h.start_worker(env=ASK)
    h.wait_settled([sub_id], timeout=30)
    assert h.stop_workers() == [0], h.diagnostics()
    assert_deployed_once_after_one_question(h, interruptions=0)
    follow_up(h)
