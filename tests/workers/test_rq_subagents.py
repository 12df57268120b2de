"""Subagents on RQ (Redis and SQLite stores): a work horse SIGKILLed inside a child.

Three cases: one child; the second of two children of one response run one after the other
(``parallel_tools=False``: the first child's recorded answer must not run again); and two
children of one parallel batch killed while both run (they meet at the researcher's barrier,
and the first child's tool holds until the kill), after which both are resumed.

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
ONE_BY_ONE = {**SUBAGENTS, "FXD_TEST_PARALLEL_TOOLS": "0"}
TOGETHER = {**SUBAGENTS, "FXD_TEST_CHILD_BARRIER": "1"}


@pytest.mark.parametrize(
    ("point", "prompt", "parts", "tool", "env"),
    [
        pytest.param(
            "subagent.in-child:lookup", "delegate crash", "a", "lookup", SUBAGENTS, id="one-child"
        ),
        pytest.param(
            "subagent.in-child:fetch",
            "delegate2 crash",
            "ab",
            "fetch",
            ONE_BY_ONE,
            id="second-of-two",
        ),
        pytest.param(
            "subagent.in-child:fetch", "delegate2 crash", "ab", "fetch", TOGETHER, id="two-at-once"
        ),
    ],
)
def test_a_horse_killed_inside_a_child_is_recovered_across_workers(
    make_harness: Callable[..., RqHarness],
    point: str,
    prompt: str,
    parts: str,
    tool: str,
    env: dict[str, str],
) -> None:
    h = make_harness(lease_ttl_s=30.0)
    first = h.start_worker(crash_plan=[point], env=env)
    sub_id = h.submit_one(SESSION, prompt, STORY_REQUEST)
    wait_until(
        lambda: first.log().count(CRASH_MARK) == 1, 40, f"the crash at {point}", poll_s=0.005
    )
    killed_at = time.time()  # within a poll (5 ms) of the SIGKILL
    h.start_worker(env=env)  # a child may be resumed by either worker
    (sub,) = h.wait_settled([sub_id], timeout=40)
    print_measure(f"recovery after SIGKILL at {point}", (sub.settled_at or 0.0) - killed_at)
    assert f"crash injected at {point}" in first.log()
    assert h.stop_workers() == [0, 0], h.diagnostics()

    world = h.world()
    children = child_requests(world)
    assert len(children) == len(parts)
    assert_invariants(world, [STORY_REQUEST, *children], sessions=1 + len(parts))
    assert_children_resumed(world, parts, killed_in=tool, together=env is TOGETHER)

    h.start_worker(env=env)
    next_id = h.submit_one(SESSION, "status?", NEXT_REQUEST)
    h.wait_settled([next_id], timeout=30)
    assert h.stop_workers() == [0]
    after = h.world()
    assert_invariants(after, [STORY_REQUEST, NEXT_REQUEST, *children])
    assert after.submission(NEXT_REQUEST).status == "completed"
