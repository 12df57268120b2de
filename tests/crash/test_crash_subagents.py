"""Subagents under real SIGKILLs (DESIGN §5), on the embedded runtime.

The driver's ``delegate`` scenario asks the story agent's ``research`` subagent for one task;
``delegate2`` for two in one model response, run one after the other (``parallel_tools=False``:
its test is about a first child whose answer was recorded before the kill); ``delegate2-batch``
for the same two as one parallel batch, both children in flight at once (they meet at a
barrier, and the first child's tool holds until the kill). The process is killed at
``subagent.in-child:<tool>``: inside a child run inline by the parent's call, once the child's
tool result is durable (``lookup`` in the first child, ``fetch`` in the second). A clean
process then runs the parent to rest: its interrupted calls are re-executed (never
``outcome_unknown``), each reattaches to the same child session and submission, and resumes
the child from its last recorded step. The shared invariants hold (those of
``fxdurable.testing`` include the subagent links), and a next message completes.
"""

from __future__ import annotations

import pytest
from crash_harness import CrashHarness, assert_clean

from tests.kit.delegation import assert_children_resumed, child_requests
from tests.kit.story import NEXT_REQUEST, STORY_REQUEST
from tests.kit.world import World, assert_invariants

pytestmark = pytest.mark.crash


def recover_and_follow_up(crash: CrashHarness, scenario: str) -> World:
    """Run to rest, check, send a next message, check again; the world from before it."""
    assert_clean(crash.run(None, scenario), "the run to rest")
    world = crash.world()
    children_requests = child_requests(world)
    children = len(children_requests)
    assert_invariants(world, [STORY_REQUEST, *children_requests], sessions=1 + children)
    assert_clean(crash.run(None, scenario, follow_up=True), "the follow-up run")
    after = crash.world()
    assert_invariants(after, [STORY_REQUEST, NEXT_REQUEST, *children_requests])
    assert after.submission(NEXT_REQUEST).status == "completed"
    return world


def test_a_parent_killed_inside_its_child_reattaches_and_resumes_it(crash: CrashHarness) -> None:
    crash.crash("subagent.in-child:lookup", "delegate")
    world = recover_and_follow_up(crash, "delegate")
    assert_children_resumed(world, "a", killed_in="lookup")


def test_a_parent_killed_inside_the_second_child_of_one_response(crash: CrashHarness) -> None:
    """Two subagent calls of one model response; killed inside the second child: the first
    call's answer stays recorded (its child is not run again), the second resumes."""
    crash.crash("subagent.in-child:fetch", "delegate2")
    world = recover_and_follow_up(crash, "delegate2")
    assert_children_resumed(world, "ab", killed_in="fetch")
    assert len(world.calls_of("lookup")) == 1  # the first child ran before the kill only


def test_a_parent_killed_while_two_children_run_in_one_batch(crash: CrashHarness) -> None:
    """Both children of one batch in flight: the second's tool result is durable, the first's
    tool still running. After the restart both calls are re-executed, each reattaches to its
    child: the second goes on after its recorded fetch, the first re-runs its lookup (safe,
    never recorded); both answers reach the parent in asked order."""
    crash.crash("subagent.in-child:fetch", "delegate2-batch")
    world = recover_and_follow_up(crash, "delegate2-batch")
    assert_children_resumed(world, "ab", killed_in="fetch", together=True)
