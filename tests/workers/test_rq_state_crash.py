"""Persisted state (``ctx.state``) as the guard of a one-shot side effect, on RQ with SQLite
and Redis stores: real ``fxdurable worker`` horses SIGKILLed at named crash points (the
embedded twin is ``tests/crash/test_crash_state.py``, which says what each case proves).

- ``tool.after-record:send_welcome``: the welcome's result and its state write committed
  together; the horse dies; a new horse goes on from the record. A next message asking again
  finds ``welcomed`` and sends nothing: one welcome.
- ``tool.after-execute:send_welcome``: the welcome went out, its result and state write did
  not commit (the only ``state.changed`` is the re-run's); the idempotent call re-runs with the
  same execution id, which the mail service dedupes: one welcome.
- ``tool.after-execute:upgrade_plan`` (unsafe): settled ``outcome_unknown``, its write never
  happened; the next turn reads the state as it was (the welcome only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from crash_cases import NEXT_REQUEST, REQUEST, SESSION
from rq_support import RqHarness
from test_rq_crash_suite import LEASE_TTL_S, crash_and_recover

from tests.kit.story import ACCOUNT, welcomed_text
from tests.kit.world import World, assert_invariants, assert_model_requests

pytestmark = [pytest.mark.redis, pytest.mark.crash]

WELCOME = "welcome crash"


def persisted(h: RqHarness) -> dict[str, Any]:
    session = h.read(lambda v: v.get_session(SESSION))
    return {} if session is None else dict(session.state)


def next_message(h: RqHarness, prompt: str) -> World:
    """A fresh worker answers a next message on the session."""
    h.start_worker()
    sub_id = h.submit_one(SESSION, prompt, NEXT_REQUEST)
    (sub,) = h.wait_settled([sub_id], timeout=30)
    assert sub.status == "completed", sub
    assert h.stop_workers() == [0], h.diagnostics()
    world = h.world()
    assert_invariants(world, [REQUEST, NEXT_REQUEST])
    return world


@pytest.mark.parametrize(
    ("point", "runs"),
    [("tool.after-record:send_welcome", 1), ("tool.after-execute:send_welcome", 2)],
)
def test_a_welcome_guarded_by_state_is_sent_once(
    make_harness: Callable[..., RqHarness], point: str, runs: int
) -> None:
    h = make_harness(lease_ttl_s=LEASE_TTL_S)
    world = crash_and_recover(h, [point], prompt=WELCOME).world
    sub = world.submission(REQUEST)
    assert sub.status == "completed" and sub.interruptions == 1, sub
    assert sub.result_text == welcomed_text("welcome sent to crash")
    task = world.task("send_welcome", REQUEST)
    assert (task.status, task.runs) == ("completed", runs)
    assert world.effects_of("send_welcome") == [task.execution_id]
    # One state write, by the run that completed (never the killed one's, uncommitted).
    (change,) = world.events_of("state.changed")
    last_run = world.task_events(task, "tool.started")[-1]
    assert change.seq > last_run.seq and change.data["set"] == {"welcomed": "crash"}
    assert_model_requests(world)

    world = next_message(h, WELCOME)
    assert world.submission(NEXT_REQUEST).result_text == welcomed_text("crash was already welcomed")
    assert len(world.effects_of("send_welcome")) == 1
    assert persisted(h) == {"welcomed": "crash"}


def test_an_unsafe_write_left_unknown_never_happened(
    make_harness: Callable[..., RqHarness],
) -> None:
    h = make_harness(lease_ttl_s=LEASE_TTL_S)
    world = crash_and_recover(
        h, ["tool.after-execute:upgrade_plan"], prompt="welcome and upgrade crash"
    ).world
    upgrade = world.task("upgrade_plan", REQUEST)
    assert (upgrade.status, upgrade.runs) == ("outcome_unknown", 1)
    assert persisted(h) == {"welcomed": "crash"}
    assert [e.data["tool"] for e in world.events_of("state.changed")] == ["send_welcome"]

    world = next_message(h, ACCOUNT)
    account = world.task("read_account", NEXT_REQUEST)
    assert json.loads(account.result or "") == {"welcomed": "crash"}
    assert len(world.effects_of("upgrade_plan")) == 1
