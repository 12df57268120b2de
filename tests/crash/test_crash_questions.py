"""Permission prompts under real SIGKILLs (DESIGN §3.11, §5), on the embedded runtime.

The driver's ``ask`` scenario gives the story agent a ``before_tool`` hook that logs every
call to ``hooks.log`` and asks a person before ``deploy`` (``fx.ask``). A run rests once the
story waits for the answer; a run with ``--answer allow`` answers it (``session.answer``)
and runs the story to its end. The process is killed just before the deploy's hook
(``hook.before-tool:deploy``), just after the question committed while it still holds the
lease (``input.after-request:deploy``), and while it waits with the lease let go (the driver
SIGKILLs itself then). Every time: the question is asked once (one ``input.requested``), the
hook ran once for deploy, the deploy happened exactly once and never as ``outcome_unknown``,
the shared invariants hold at rest, and a next message completes.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from crash_harness import CrashHarness, assert_clean, assert_crashed

from tests.kit.story import DONE_TEXT, UNKNOWN_MARK, read_lines
from tests.kit.world import World, assert_invariants

pytestmark = pytest.mark.crash

SCENARIO = "ask"
QUESTION = 'May I deploy {"version": "2.0"}?'


def rest_on_the_question(crash: CrashHarness) -> None:
    """A clean run rests on the story's question, holding no lease, the deploy not run."""
    code, out, err = crash.run(None, SCENARIO)
    assert_clean((code, out, err), "the run that asks")
    assert f"question {json.dumps(QUESTION)}" in out, out
    world = crash.world()
    story = world.submission()
    assert story.status == "running" and story.input_request is not None
    assert world.task("deploy").status == "pending" and world.task("deploy").runs == 0
    assert world.effects_of("deploy") == []
    assert world.summary.violations == (), world.summary.violations


def answer_and_finish(crash: CrashHarness, *, interruptions: int) -> World:
    result = crash.run(None, SCENARIO, extra_args=["--answer", "allow"])
    assert_clean(result, "the run that answers")
    assert "answered allow" in result[1], result[1]
    world = crash.world()
    assert_invariants(world, ["crash-1"], sessions=1)
    story = world.submission()
    assert (story.status, story.result_text) == ("completed", DONE_TEXT), story
    assert story.interruptions == interruptions
    deploy = world.task("deploy")
    assert (deploy.status, deploy.runs) == ("completed", 1)
    assert deploy.answer is not None and deploy.answer.kind == "allow"
    assert len(world.effects_of("deploy")) == 1  # exactly once
    assert not world.events_of("tool.outcome_unknown")
    (asked,) = world.events_of("input.requested")  # asked once
    assert asked.data["question"] == QUESTION and asked.data["task"] == deploy.id
    assert len(world.events_of("input.answered")) == 1
    assert read_lines(crash.workdir / "hooks.log").count("deploy") == 1
    crash.follow_up(SCENARIO)
    return world


def test_a_crash_before_the_deploys_hook_asks_once_and_deploys_once(crash: CrashHarness) -> None:
    crash.crash("hook.before-tool:deploy", SCENARIO)
    assert read_lines(crash.workdir / "hooks.log") == ["read_state", "charge"]
    rest_on_the_question(crash)
    answer_and_finish(crash, interruptions=1)


def test_a_crash_after_the_question_committed_leaves_it_asked_once(crash: CrashHarness) -> None:
    crash.crash("input.after-request:deploy", SCENARIO)
    # The question and the end of its attempt were one commit: nothing was interrupted.
    world = crash.world()
    assert world.submission().input_request is not None
    assert [a.status for a in world.attempts[world.submission().id]] == ["yielded"]
    rest_on_the_question(crash)  # frees the dead process's lease, asks nothing again
    answer_and_finish(crash, interruptions=0)


def test_a_process_killed_while_waiting_loses_nothing(crash: CrashHarness) -> None:
    code, out, err = crash.run(None, SCENARIO, extra_args=["--kill-while-waiting"])
    assert code == -signal.SIGKILL and "killed while waiting" in err, (code, out, err)
    world = crash.world()
    assert world.sessions["s"].lease.owner is None  # it held no lease while it waited
    rest_on_the_question(crash)
    answer_and_finish(crash, interruptions=0)


def test_a_turn_out_of_attempts_asks_a_person_then_goes_on_or_fails(
    store_url: str, workdir: Path
) -> None:
    """``Durability(max_attempts=1, on_exhausted="ask")``: the one attempt dies mid-deploy;
    recovery asks instead of failing, the cut-short deploy still ``running`` (recovery's
    evidence). ``allow`` grants a fresh budget: recovery resolves the deploy by its policy
    (``outcome_unknown``, never re-run) and the model inspects. (``deny``: the runtime tests.)"""
    crash = CrashHarness(store_url, workdir, max_attempts=1)
    exhausted = ["--on-exhausted", "ask"]
    spec = "tool.after-execute:deploy"
    assert_crashed(crash.run(spec, extra_args=exhausted), spec)
    result = crash.run(None, extra_args=exhausted)
    assert_clean(result, "the recovery that asks")
    assert "question " in result[1] and "interrupted 1 times" in result[1], result[1]
    world = crash.world()
    assert world.summary.violations == (), world.summary.violations
    story = world.submission()
    assert story.status == "running" and story.interruptions == 1
    assert world.task("deploy").status == "running"  # recovery has not resolved it yet
    (asked,) = world.events_of("input.requested")
    assert asked.data["about"] == "exhausted" and "task" not in asked.data

    result = crash.run(None, extra_args=[*exhausted, "--answer", "allow"])
    assert_clean(result, "the run that answers")
    world = crash.world()
    assert_invariants(world, ["crash-1"], sessions=1)
    story = world.submission()
    assert story.status == "completed" and "will not deploy again" in (story.result_text or "")
    deploy = world.task("deploy")
    assert deploy.status == "outcome_unknown" and deploy.runs == 1
    assert UNKNOWN_MARK in (deploy.result or "")
    assert len(world.effects_of("deploy")) == 1
    assert [e.data["answer"] for e in world.events_of("input.answered")] == ["allow"]
    crash.follow_up()
