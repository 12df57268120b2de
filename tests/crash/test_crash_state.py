"""Persisted state (``ctx.state``) as the guard of a one-shot side effect, under real SIGKILLs
(DESIGN §5), on the embedded runtime.

``send_welcome`` (idempotent) sends the welcome only if the session's state has no
``welcomed`` yet, then sets it; the mail service dedupes on the call's execution id. The state
is the guard across calls and turns, the execution id within one call's retries:

- killed at ``tool.after-record`` (the result and the state write committed together): the
  next message asking again finds ``welcomed`` and sends nothing; one welcome in all;
- killed at ``tool.after-execute`` (the welcome sent, neither result nor state committed):
  the database shows no state write; recovery re-runs the call with the same execution id, the
  service dedupes, and this time the state commits; the next message sends nothing;
- the unsafe ``upgrade_plan`` killed at ``tool.after-execute``: recovery settles it
  ``outcome_unknown`` and its write never happened; the next turn (``account?``) reads the
  state as it was before (the welcome only).

Each case: the invariants after the crash and after the run to rest (``fxdurable.testing``
checks that the state is the fold of its ``state.changed`` events, each with its completed
call), then the next message completes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from crash_harness import CrashHarness, assert_clean

from tests.kit.story import NEXT_REQUEST, SESSION, STORY_REQUEST, welcomed_text
from tests.kit.world import World, assert_invariants, assert_model_requests

pytestmark = pytest.mark.crash


def persisted(crash: CrashHarness) -> dict[str, Any]:
    session = crash.read(lambda v: v.get_session(SESSION))
    return {} if session is None else dict(session.state)


def welcomes(world: World) -> list[str]:
    return world.effects_of("send_welcome")


def next_message(crash: CrashHarness, scenario: str) -> World:
    assert_clean(crash.run(None, scenario, follow_up=True), "the next message")
    world = crash.world()
    assert_invariants(world, [STORY_REQUEST, NEXT_REQUEST], sessions=1)
    assert world.submission(NEXT_REQUEST).status == "completed"
    return world


def test_welcome_killed_after_its_commit_is_not_sent_again(crash: CrashHarness) -> None:
    crash.crash("tool.after-record:send_welcome", "welcome")
    # The result and the state committed together, before the kill.
    assert persisted(crash) == {"welcomed": "crash"}
    world = crash.recover("welcome")
    sub = world.submission()
    assert sub.status == "completed" and sub.interruptions == 1, sub
    assert sub.result_text == welcomed_text("welcome sent to crash")
    assert world.task("send_welcome").runs == 1  # served from its record, never re-run
    assert_model_requests(world)

    world = next_message(crash, "welcome")
    assert world.submission(NEXT_REQUEST).result_text == welcomed_text("crash was already welcomed")
    assert len(welcomes(world)) == 1
    assert len(world.events_of("state.changed")) == 1
    assert persisted(crash) == {"welcomed": "crash"}


def test_welcome_killed_before_its_commit_wrote_nothing_and_is_sent_once(
    crash: CrashHarness,
) -> None:
    crash.crash("tool.after-execute:send_welcome", "welcome")
    # The welcome went out; its call's result and state write did not commit.
    assert persisted(crash) == {}
    assert not crash.world().events_of("state.changed")
    assert len(welcomes(crash.world())) == 1
    world = crash.recover("welcome")
    task = world.task("send_welcome")
    assert (task.status, task.runs) == ("completed", 2)  # idempotent: re-run, same key
    assert [run for _, run in world.calls_of("send_welcome")] == [1, 2]
    assert welcomes(world) == [task.execution_id], "the service deduped the retry"
    (change,) = world.events_of("state.changed")
    (_, rerun) = world.task_events(task, "tool.started")
    assert change.seq > rerun.seq, "the state was written by the run that completed"

    world = next_message(crash, "welcome")
    assert world.submission(NEXT_REQUEST).result_text == welcomed_text("crash was already welcomed")
    assert len(welcomes(world)) == 1


def test_an_unsafe_write_left_unknown_never_happened(crash: CrashHarness) -> None:
    crash.crash("tool.after-execute:upgrade_plan", "upgrade")
    assert persisted(crash) == {"welcomed": "crash"}
    world = crash.recover("upgrade")
    upgrade = world.task("upgrade_plan")
    assert (upgrade.status, upgrade.runs) == ("outcome_unknown", 1)
    assert len(world.effects_of("upgrade_plan")) == 1  # it did happen, the store cannot know
    assert world.submission().result_text == (
        "The upgrade's outcome is unknown; I will not repeat it blindly."
    )
    assert persisted(crash) == {"welcomed": "crash"}, "the unknown call's write never happened"
    assert [e.data["tool"] for e in world.events_of("state.changed")] == ["send_welcome"]

    world = next_message(crash, "upgrade")
    account = world.task("read_account", NEXT_REQUEST)
    assert json.loads(account.result or "") == {"welcomed": "crash"}
    assert world.submission(NEXT_REQUEST).result_text == f"Account: {account.result}"
    assert len(world.effects_of("upgrade_plan")) == 1
