"""Subagents under real SIGKILLs (DESIGN §5), on the embedded runtime.

The driver's ``delegate`` scenario asks the story agent's ``research`` subagent for one task;
``delegate2`` for two in one model response (run one after the other: parallel batches are not
on main yet). The process is killed at ``subagent.in-child:<tool>``: inside a child run inline
by the parent's call, once the child's tool result is durable (``lookup`` in the first child,
``fetch`` in the second). A clean process then runs the parent to rest: its call is
re-executed (never ``outcome_unknown``), reattaches to the same child session and submission,
and resumes the child from its last recorded step. The shared invariants hold (those of
``fxdurable.testing`` include the subagent links), and a next message completes.
"""

from __future__ import annotations

import pytest
from crash_harness import CrashHarness, assert_clean

from fxdurable.core.subagent import child_request_id, child_session_id
from tests.kit.delegation import delegated_text, findings
from tests.kit.story import NEXT_REQUEST, SESSION, STORY_REQUEST
from tests.kit.world import World, assert_invariants, assert_model_requests

pytestmark = pytest.mark.crash


def recover_and_follow_up(crash: CrashHarness, scenario: str, children: int) -> World:
    """Run to rest, check, send a next message, check again; the world from before it."""
    assert_clean(crash.run(None, scenario), "the run to rest")
    world = crash.world()
    calls = world.tasks_of("research")
    children_requests = [child_request_id(t.execution_id) for t in calls]
    assert_invariants(world, [STORY_REQUEST, *children_requests], sessions=1 + children)
    assert_clean(crash.run(None, scenario, follow_up=True), "the follow-up run")
    after = crash.world()
    assert_invariants(after, [STORY_REQUEST, NEXT_REQUEST, *children_requests])
    assert after.submission(NEXT_REQUEST).status == "completed"
    return world


def assert_children_resumed(world: World, parts: str, *, killed_in: str) -> None:
    sub = world.submission()
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == delegated_text("crash", parts)
    assert sub.interruptions == 1
    calls = world.tasks_of("research")
    assert [t.index for t in calls] == list(range(len(parts)))
    for call, part in zip(calls, parts, strict=True):
        child = child_session_id(SESSION, call.execution_id)
        assert (call.status, call.result, call.child_session) == (
            "completed",
            findings("crash", part),
            child,
        )
        assert not world.task_events(call, "tool.outcome_unknown")
        # One child session, one child submission, linked both ways.
        session = world.sessions[child]
        assert (session.parent_session, session.parent_task) == (SESSION, call.id)
        [child_sub] = [s for s in world.submissions if s.session_id == child]
        assert child_sub.request_id == child_request_id(call.execution_id)
        assert child_sub.result_text == findings("crash", part)
    # The killed child resumed from its recorded tool result: the tool ran once, in the
    # killed process; every model round of every session was asked once (none re-run).
    [(execution, run)] = world.calls_of(killed_in)
    assert run == 1
    assert_model_requests(world)
    killed = [t for t in world.tasks if t.execution_id == execution]
    [killed_child] = {t.session_id for t in killed}
    assert world.sessions[killed_child].parent_session == SESSION
    interrupted = [s for s in world.submissions if s.session_id == killed_child]
    assert [s.interruptions for s in interrupted] == [1]
    # The parent's killed call was re-executed by recovery, each other call ran once.
    reasons = {
        call.index: [e.data.get("reason") for e in world.task_events(call, "tool.started")]
        for call in calls
    }
    last = len(parts) - 1
    assert reasons[last] == [None, "recovery"]
    assert all(reasons[i] == [None] for i in range(last))


def test_a_parent_killed_inside_its_child_reattaches_and_resumes_it(crash: CrashHarness) -> None:
    crash.crash("subagent.in-child:lookup", "delegate")
    world = recover_and_follow_up(crash, "delegate", children=1)
    assert_children_resumed(world, "a", killed_in="lookup")


def test_a_parent_killed_inside_the_second_child_of_one_response(crash: CrashHarness) -> None:
    """Two subagent calls of one model response; killed inside the second child: the first
    call's answer stays recorded (its child is not run again), the second resumes."""
    crash.crash("subagent.in-child:fetch", "delegate2")
    world = recover_and_follow_up(crash, "delegate2", children=2)
    assert_children_resumed(world, "ab", killed_in="fetch")
    assert len(world.calls_of("lookup")) == 1  # the first child ran before the kill only
