"""Attempt and time budgets (DESIGN §3.7): past either, ``failed`` with a structured error, and
the session comes to rest so the next message runs normally."""

from __future__ import annotations

import asyncio

import pydantic
import pytest
from fxrt_support import (
    check_invariants,
    db_url,
    event_types,
    events,
    fresh_store,
    last_user_text,
    leave_crashed_turn,
    owned_store,
    rounds_done,
    run,
    submission,
    tasks,
)

import fxdurable as fx
from fxdurable.runtime.decide import unknown_message
from fxdurable.testing import FakeClock

# A lease far longer than any clock jump in these tests: advancing the fake clock must not make
# the runtime's own lease look expired.
SLOW_LEASES = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=10_000, scan_interval_s=0.2)
FAST = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)


class Deploy(pydantic.BaseModel):
    version: str


def _echo_after_first(request: fx.ModelRequest) -> fx.ModelResponse:
    """Answers any later message with an echo; the first turn's round 0 came from the crash."""
    return fx.reply(f"echo {last_user_text(request)}")


def _deploy_tool(executed: list[str]) -> fx.Tool:
    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        executed.append(inp.version)
        return "deployed"

    return deploy


def assert_advisory(rt: fx.Runtime, sub: fx.SubmissionRecord, reason: str | None) -> None:
    """``submission.interrupted`` comes just before ``submission.failed`` when crashes
    interrupted the submission (``reason``: the budget spent), and not otherwise (None)."""
    evs = events(rt, sub.session_id)
    types = [e.type for e in evs]
    failed = types.index("submission.failed")
    if reason is None:
        assert "submission.interrupted" not in types
        return
    assert types.count("submission.interrupted") == 1
    advisory = evs[failed - 1]
    assert advisory.type == "submission.interrupted"
    assert sub.error is not None
    assert advisory.data == {
        "submission": sub.id,
        "interruptions": sub.interruptions,
        "unknown_calls": list(sub.error.unknown_calls),
        "reason": reason,
    }


def test_attempts_exhausted_fails_naming_unknown_calls_and_session_rests(tmp_path):
    url = db_url(tmp_path)
    executed: list[str] = []
    agent = fx.Agent(
        "eng",
        fx.ScriptedModel(_echo_after_first),
        tools=[_deploy_tool(executed)],
        durability=fx.Durability(max_attempts=1),
    )
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("deploy", version="1.4")], policies=["unsafe"], running=[0]
    )

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.wait(crashed.submission.id, timeout=10)
            assert sub.status.value == "failed"
            assert sub.error is not None
            assert sub.error.code == "attempts_exhausted"
            assert len(sub.error.unknown_calls) == 1
            assert "deploy" in sub.error.unknown_calls[0]
            assert crashed.tasks[0].id in sub.error.unknown_calls[0]
            assert "deploy" in sub.error.message
            assert_advisory(rt, sub, "attempts_exhausted")
            assert executed == []
            (task,) = tasks(rt, crashed.turn_id)
            assert task.status.value == "outcome_unknown"
            assert task.result == unknown_message("deploy")
            types = event_types(rt, "s1")
            assert "tool.outcome_unknown" in types
            assert types.count("submission.failed") == 1
            # wait() returns when the submission settles; the lease is let go just after.
            for _ in range(150):
                state = await s.record()
                if state is not None and state.lease.owner is None:
                    break
                await asyncio.sleep(0.02)
            assert state is not None and state.status.value == "idle"
            assert state.lease.owner is None, "the worker never let go of the lease"
            # the next message runs normally
            assert await s.run("next", timeout=10) == "echo next"
            await check_invariants(rt, "s1")

    run(main())


def test_one_interruption_within_the_attempt_budget_completes(tmp_path):
    url = db_url(tmp_path)
    executed: list[str] = []
    agent = fx.Agent(
        "eng",
        fx.ScriptedModel(_echo_after_first),
        tools=[_deploy_tool(executed)],
        durability=fx.Durability(max_attempts=2),
    )
    crashed = leave_crashed_turn(
        url, agent="eng", calls=[fx.call("deploy", version="1.4")], policies=["unsafe"], running=[0]
    )

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert sub.status.value == "completed"
            assert sub.attempts == 2 and sub.interruptions == 1
            await check_invariants(rt, "s1")

    run(main())


def test_timeout_fails_the_submission_and_the_session_rests(tmp_path):
    clock = FakeClock()
    ran: list[str] = []

    @fx.tool
    def slow_step(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Takes (fake) minutes."
        ran.append(inp.version)
        clock.advance(120)
        return "step finished"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if last_user_text(request) == "next":
            return fx.reply("fine")
        return fx.reply("", fx.call("slow_step", version=str(rounds_done(request))))

    model = fx.ScriptedModel(policy)
    agent = fx.Agent(
        "eng", model, tools=[slow_step], durability=fx.Durability(timeout_s=60, max_attempts=1)
    )

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=SLOW_LEASES, clock=clock
        ) as rt:
            s = rt.session("s1")
            with pytest.raises(fx.SubmissionFailedError) as caught:
                await s.run("work", timeout=10)
            assert caught.value.status == "failed"
            assert caught.value.error["code"] == "timeout"
            assert caught.value.error["unknown_calls"] == []
            assert ran == ["0"]  # stopped at the first step boundary past the budget
            assert len(model.requests) == 1
            sub_id = caught.value.submission_id
            (task,) = tasks(rt, sub_id)
            assert task.status.value == "completed"  # finished work is kept
            assert event_types(rt, "s1").count("submission.failed") == 1
            assert_advisory(rt, submission(rt, sub_id), None)  # no crash interrupted it
            state = await s.record()
            assert state is not None and state.status.value == "idle"
            assert await s.run("next", timeout=10) == "fine"
            await check_invariants(rt, "s1")

    run(main())


def test_timeout_after_a_crash_resolves_the_running_call_and_names_it(tmp_path):
    clock = FakeClock()
    url = db_url(tmp_path)
    executed: list[str] = []
    agent = fx.Agent(
        "eng",
        fx.ScriptedModel(_echo_after_first),
        tools=[_deploy_tool(executed)],
        durability=fx.Durability(timeout_s=60),
    )
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=[fx.call("deploy", version="1.4")],
        policies=["unsafe"],
        running=[0],
        clock=clock,
    )
    clock.advance(3600)  # the process was down for an hour; its lease expired long ago

    async def main():
        async with fx.Runtime(
            [agent], store=owned_store(url), settings=SLOW_LEASES, clock=clock
        ) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert sub.status.value == "failed"
            assert sub.error is not None and sub.error.code == "timeout"
            assert len(sub.error.unknown_calls) == 1 and "deploy" in sub.error.unknown_calls[0]
            assert_advisory(rt, sub, "time_exhausted")
            assert executed == []
            assert tasks(rt, crashed.turn_id)[0].status.value == "outcome_unknown"
            await check_invariants(rt, "s1")

    run(main())


def test_abort_intent_wins_over_an_exhausted_attempt_budget(tmp_path):
    """DESIGN §3.8/§4: an abort intent settles ``aborted`` even when the process is gone.

    Here the abort was recorded before the crashed worker's session was recovered, and the
    attempt budget is also spent. The user asked to abort; the outcome must be ``aborted``.
    """
    url = db_url(tmp_path)
    executed: list[str] = []
    agent = fx.Agent(
        "eng",
        fx.ScriptedModel(_echo_after_first),
        tools=[_deploy_tool(executed)],
        durability=fx.Durability(max_attempts=1),
    )
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=[fx.call("deploy", version="1.4")],
        policies=["unsafe"],
        running=[0],
        after=lambda journal, fence: journal.request_abort("s1"),
    )
    assert crashed.submission.abort_requested

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert tasks(rt, crashed.turn_id)[0].status.value == "outcome_unknown"
            assert executed == []
            assert sub.status.value == "aborted", (sub.status, sub.error)
            await check_invariants(rt, "s1")

    run(main())


@pytest.mark.parametrize(
    ("abort", "max_attempts", "down_s"),
    [(False, 1, 0), (True, 10, 0), (True, 1, 3600), (False, 10, 3600)],
    ids=["attempts-spent", "abort-after-answer", "abort-and-budgets-spent", "time-spent"],
)
def test_a_recorded_final_answer_settles_completed_whatever_came_after(
    tmp_path, abort, max_attempts, down_s
):
    """DESIGN §4: the final answer was recorded, then the process died before settling (the
    crash suite's ``turn.in-commit``). Finished work is never discarded: not by an abort that
    came after the answer, not by an attempt or time budget spent by the crash."""
    clock = FakeClock()
    url = db_url(tmp_path)

    def no_second_answer(request: fx.ModelRequest) -> fx.ModelResponse:
        raise AssertionError("the recorded answer is served from the record")

    agent = fx.Agent(
        "eng",
        fx.ScriptedModel(no_second_answer),
        durability=fx.Durability(max_attempts=max_attempts, timeout_s=60),
    )
    crashed = leave_crashed_turn(  # round 0 recorded "on it" with no tool call: the answer
        url,
        agent="eng",
        clock=clock,
        after=(lambda journal, fence: journal.request_abort("s1")) if abort else None,
    )
    clock.advance(down_s)

    async def main():
        async with fx.Runtime(
            [agent], store=owned_store(url), settings=SLOW_LEASES, clock=clock
        ) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert (sub.status.value, sub.error) == ("completed", None)
            assert sub.result == "on it"
            assert sub.interruptions == 1
            types = event_types(rt, "s1")
            assert "submission.failed" not in types and "submission.aborted" not in types
            await check_invariants(rt, "s1")

    run(main())


def test_model_error_fails_with_a_structured_error(tmp_path):
    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if last_user_text(request) == "explode":
            raise RuntimeError("provider returned 500")
        return fx.reply("fine")

    agent = fx.Agent("eng", fx.ScriptedModel(policy))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            with pytest.raises(fx.SubmissionFailedError) as caught:
                await s.run("explode", timeout=10)
            assert caught.value.error["code"] == "model_error"
            assert "provider returned 500" in caught.value.error["message"]
            assert await s.run("again", timeout=10) == "fine"
            await check_invariants(rt, "s1")

    run(main())
