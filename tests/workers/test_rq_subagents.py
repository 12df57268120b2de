"""Subagents on RQ (Redis and SQLite stores): a work horse SIGKILLed inside a child.

The story agent's ``research`` subagent (``tests.kit.delegation``) runs its child inline in
the parent's job. The horse dies at ``subagent.in-child:<tool>`` (a child's tool result is
durable); the RQ parent survives, and a second worker starts: each one's scan wakes both
orphaned sessions, so the child is resumed either by the parent's re-executed call or by a
job of its own, on either worker (the call then waits for it). Either way: one child session
and one submission per call, the child's recorded steps not run again, the parent's call
completed with the child's answer, the invariants hold, and a fresh worker completes a next
message.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from rq_story_agents import CRASH_MARK
from rq_support import RqHarness, print_measure, wait_until

from tests.kit.delegation import assert_children_resumed, child_requests
from tests.kit.story import NEXT_REQUEST, SESSION, STORY_REQUEST
from tests.kit.world import assert_invariants

pytestmark = [pytest.mark.redis, pytest.mark.crash]

SUBAGENTS = {"FXD_TEST_SUBAGENTS": "1"}


@pytest.mark.parametrize(
    ("point", "prompt", "parts", "tool"),
    [
        pytest.param("subagent.in-child:lookup", "delegate crash", "a", "lookup", id="one-child"),
        pytest.param(
            "subagent.in-child:fetch", "delegate2 crash", "ab", "fetch", id="second-of-two"
        ),
    ],
)
def test_a_horse_killed_inside_a_child_is_recovered_across_workers(
    make_harness: Callable[..., RqHarness], point: str, prompt: str, parts: str, tool: str
) -> None:
    h = make_harness(lease_ttl_s=30.0)
    first = h.start_worker(crash_plan=[point], env=SUBAGENTS)
    sub_id = h.submit_one(SESSION, prompt, STORY_REQUEST)
    wait_until(
        lambda: first.log().count(CRASH_MARK) == 1, 40, f"the crash at {point}", poll_s=0.005
    )
    killed_at = time.time()  # within a poll (5 ms) of the SIGKILL
    h.start_worker(env=SUBAGENTS)  # the child may be resumed by either worker
    (sub,) = h.wait_settled([sub_id], timeout=40)
    print_measure(f"recovery after SIGKILL at {point}", (sub.settled_at or 0.0) - killed_at)
    assert f"crash injected at {point}" in first.log()
    assert h.stop_workers() == [0, 0], h.diagnostics()

    world = h.world()
    children = child_requests(world)
    assert len(children) == len(parts)
    assert_invariants(world, [STORY_REQUEST, *children], sessions=1 + len(parts))
    assert_children_resumed(world, parts, killed_in=tool)

    h.start_worker(env=SUBAGENTS)
    next_id = h.submit_one(SESSION, "status?", NEXT_REQUEST)
    h.wait_settled([next_id], timeout=30)
    assert h.stop_workers() == [0]
    after = h.world()
    assert_invariants(after, [STORY_REQUEST, NEXT_REQUEST, *children])
    assert after.submission(NEXT_REQUEST).status == "completed"
