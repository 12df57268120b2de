"""What each crash point of the worker crash suites must leave behind (DESIGN §5), checked
from an at-rest ``World``: shared by the RQ suite (``test_rq_crash_suite.py``) and the SQS suite
(``test_sqs_crash_suite.py``), as in tests/crash/test_crash_suite.py.

:data:`CASES` pairs a crash plan (the points the worker dies at, in turn) with its check.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.kit.delegation import child_requests
from tests.kit.story import UNKNOWN_MARK, done_text
from tests.kit.world import (
    World,
    assert_deploy_killed_after_progress,
    assert_invariants,
    assert_model_requests,
)

SESSION = "s"
REQUEST = "crash-1"
NEXT_REQUEST = "crash-next"
STORY = "story crash"


def started_reasons(world: World, tool: str) -> list[object]:
    task = world.task(tool, REQUEST)
    return [e.data.get("reason") for e in world.task_events(task, "tool.started")]


def assert_story_completed(world: World, *, interruptions: int) -> None:
    sub = world.submission(REQUEST)
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == done_text("crash")
    assert sub.interruptions == interruptions, sub
    for tool in ("read_state", "charge", "deploy"):
        assert world.task(tool, REQUEST).status == "completed"
    assert not world.tasks_of("check_deploy", REQUEST)
    assert world.effects_of("charge") == [world.task("charge", REQUEST).execution_id]
    assert world.effects_of("deploy") == [world.task("deploy", REQUEST).execution_id]


def assert_unknown_deploy(world: World, *, deploys: int, calls: int | None = None) -> None:
    """Unsafe: never re-executed; recorded outcome_unknown; the model is told and inspects."""
    sub = world.submission(REQUEST)
    assert sub.status == "completed", (sub.status, sub.error)
    deploy = world.task("deploy", REQUEST)
    assert deploy.status == "outcome_unknown" and deploy.runs == 1, deploy
    assert UNKNOWN_MARK in (deploy.result or "")
    assert world.task_events(deploy, "tool.outcome_unknown")
    assert len(world.effects_of("deploy")) == deploys
    # Executed at most once, never re-run.
    assert len(world.calls_of("deploy")) == (deploys if calls is None else calls)
    check = world.task("check_deploy", REQUEST)
    assert check.status == "completed" and check.round == deploy.round + 1
    assert check.result == f"{deploys} deploy(s) on record"
    assert "will not deploy again" in (sub.result_text or "")
    assert world.effects_of("charge") == [world.task("charge", REQUEST).execution_id]
    assert_model_requests(world)


def check_model_cut_off(world: World) -> None:
    # The response was not recorded: the model is asked again, and recorded once.
    assert_story_completed(world, interruptions=1)
    assert_model_requests(world, again=[(STORY, 0)])


def check_intent_deploy(world: World) -> None:
    assert_unknown_deploy(world, deploys=0)


def check_execute_deploy(world: World) -> None:
    assert_unknown_deploy(world, deploys=1)


def check_execute_charge(world: World) -> None:
    # Idempotent, executed, result lost: re-executed with the SAME execution id.
    assert_story_completed(world, interruptions=1)
    task = world.task("charge", REQUEST)
    assert world.calls_of("charge") == [(task.execution_id, 1), (task.execution_id, 2)]
    assert world.ledger == [task.execution_id]
    assert (task.result or "").startswith("order crash was already charged"), task.result
    assert started_reasons(world, "charge") == [None, "recovery"]
    assert_model_requests(world)


def check_turn_commit(world: World) -> None:
    # The final answer was recorded; only the settling transaction died.
    assert_story_completed(world, interruptions=1)
    assert_model_requests(world)
    attempts = world.attempts[world.submission(REQUEST).id]
    assert [a.status for a in attempts] == ["interrupted", "finished"]


def check_recovery_claim(world: World) -> None:
    # A crash right after the recovery claimed the session changes nothing about the deploy.
    assert_unknown_deploy(world, deploys=1)
    assert world.submission(REQUEST).interruptions >= 1


def check_progress_deploy(world: World) -> None:
    assert_deploy_killed_after_progress(world, REQUEST)
    assert_model_requests(world)


CASES: list[tuple[list[str], Callable[[World], None]]] = [
    (["model.after-finish"], check_model_cut_off),
    (["tool.after-intent:deploy"], check_intent_deploy),
    (["tool.after-execute:deploy"], check_execute_deploy),
    (["tool.after-execute:charge"], check_execute_charge),
    (["tool.after-progress:deploy"], check_progress_deploy),
    (["turn.in-commit"], check_turn_commit),
    (["tool.after-execute:deploy", "recovery.after-claim"], check_recovery_claim),
]


def check_continuation(world: World) -> None:
    """``ticks 3 cont`` ran past one job's deadline: the attempt yielded and the turn went on in
    a new job. The yield was committed, so a crash around the continuation's enqueue costs no
    attempt."""
    sub = world.submission(REQUEST)
    assert sub.status == "completed" and sub.result_text == "Ticked 3 times: cont", sub
    assert sub.interruptions == 0
    statuses = [a.status for a in world.attempts[sub.id]]
    assert statuses == ["yielded", "finished"], statuses
    assert [e.data.get("reason") for e in world.events_of("attempt.yielded")] == ["deadline"]
    assert not world.events_of("attempt.interrupted")
    assert len(world.calls_of("tick")) == 3
    assert_model_requests(world)


def check_follow_up(world: World) -> None:
    """The next message, after recovery, completed normally."""
    sub = world.submission(NEXT_REQUEST)
    assert sub.status == "completed", (sub.status, sub.error)
    assert (sub.result_text or "").startswith("Status: "), sub.result_text
    assert_invariants(world, [REQUEST, NEXT_REQUEST, *child_requests(world)])
    assert world.task("read_state", NEXT_REQUEST).status == "completed"
