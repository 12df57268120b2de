"""What the crash suites check of a turn whose commits were merged (issue 23 §2): the story's
``sequence <tag>`` prompt asks for read_state, charge and deploy in one response, run one after
another (``parallel_tools=False``), so each result but the last commits with the next call's
intent. Shared by tests/crash (SQLite) and the RQ+Redis and SQS+DynamoDB worker suites.

A crash point fires after the commit that carries it: ``tool.after-record:<tool>`` where the
next intent joined the commit is the same state as the next call's ``tool.after-intent``, so
the next call is found ``running`` without having run, and recovery settles it by its policy.
"""

from __future__ import annotations

from tests.kit.story import STORY_REQUEST, UNKNOWN_MARK, sequenced_text
from tests.kit.world import World, assert_model_requests

SEQUENCE = "sequence crash"  # the prompt
SEQUENTIAL_ENV = {"FXD_TEST_PARALLEL_TOOLS": "0"}  # the worker suites' agent, one call at a time


def _settled(world: World, request: str) -> None:
    sub = world.submission(request)
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == sequenced_text("crash"), sub.result_text
    assert sub.interruptions == 1
    read = world.task("read_state", request)
    assert read.status == "completed" and read.runs == 1  # recorded before: never re-run
    assert len(world.calls_of("read_state")) == 1
    assert_model_requests(world)


def _charged_once(world: World, request: str, *, run: int) -> None:
    charge = world.task("charge", request)
    assert charge.status == "completed" and charge.runs == run
    assert world.ledger == [charge.execution_id]  # one charge, under its own key
    assert world.calls_of("charge") == [(charge.execution_id, run)]


def check_charge_promised(world: World, request: str = STORY_REQUEST) -> None:
    """Killed with read_state's result and charge's intent committed (one commit): charge,
    found running without having run, runs once, as its second run; deploy runs normally."""
    _settled(world, request)
    _charged_once(world, request, run=2)
    deploy = world.task("deploy", request)
    assert deploy.status == "completed" and deploy.runs == 1
    assert world.effects_of("deploy") == [deploy.execution_id]


def check_deploy_promised(world: World, request: str = STORY_REQUEST) -> None:
    """Killed with charge's result and deploy's intent committed (one commit): deploy is found
    running, so its outcome is unknown (unsafe: never re-run) although it took no effect; the
    model is told and inspects. charge's result was recorded: it is not run again."""
    _settled(world, request)
    _charged_once(world, request, run=1)
    deploy = world.task("deploy", request)
    assert deploy.status == "outcome_unknown" and deploy.runs == 1, deploy
    assert UNKNOWN_MARK in (deploy.result or "")
    assert world.task_events(deploy, "tool.outcome_unknown")
    assert world.effects_of("deploy") == [] and world.calls_of("deploy") == []
    assert world.task("check_deploy", request).status == "completed"


def check_last_result(world: World, request: str = STORY_REQUEST) -> None:
    """Killed after deploy's result, the round's last, which commits alone before the next
    model request: nothing re-runs; the model answers from the records."""
    _settled(world, request)
    _charged_once(world, request, run=1)
    deploy = world.task("deploy", request)
    assert deploy.status == "completed" and deploy.runs == 1
    assert world.calls_of("deploy") == [(deploy.execution_id, 1)]


# (crash point, check): both names of each merged state, and the round's last result.
MERGED_CASES = [
    ("tool.after-record:read_state", check_charge_promised),
    ("tool.after-intent:charge", check_charge_promised),
    ("tool.after-record:charge", check_deploy_promised),
    ("tool.after-intent:deploy", check_deploy_promised),
    ("tool.after-record:deploy", check_last_result),
]
