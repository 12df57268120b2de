"""Questions that expire (``fx.ask(question, timeout_s=, on_timeout=)``) in the embedded
runtime on SQLite: the timer is on the session's record, honoured by the local queue's delayed
wake and by the scan, so it fires after a restart too; time is driven by an injected clock
wherever the runtime allows (the scan reads it), and by the real delay only where the local
queue's own timer is the thing under test."""

from __future__ import annotations

import pydantic
import pytest
from fxrt_support import (
    FAST,
    NO_SCAN,
    check_invariants,
    db_url,
    event_types,
    fresh_store,
    last_user_text,
    leave_crashed_turn,
    owned_store,
    read,
    rounds_done,
    run,
    submission,
    tasks,
)
from test_hooks_and_questions import SESSION, _deploy_tool, _until
from test_hooks_and_questions import _waiting as _asked

import fxdurable as fx
from fxdurable.core.asking import question_due_at
from fxdurable.runtime.reconcile import orphaned_sessions
from fxdurable.testing import FakeClock


def _agent(
    executed: list[str],
    *,
    timeout_s: float,
    on_timeout: str = "deny",
    model: fx.Model | None = None,
) -> fx.Agent:
    def before_tool(tool: str, arguments: str) -> fx.Ask:
        return fx.ask(f"May I run {tool}?", timeout_s=timeout_s, on_timeout=on_timeout)  # type: ignore[arg-type]

    script = model or fx.ScriptedModel(
        [fx.reply("deploying", fx.call("deploy", version="2.0")), fx.reply("done")]
    )
    return fx.Agent("eng", script, tools=[_deploy_tool(executed)], before_tool=before_tool)


def _clocked(tmp_path, agent: fx.Agent, clock: FakeClock) -> fx.Runtime:
    """A runtime on a fresh store whose time (the scan's included) is ``clock``'s."""
    return fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST, clock=clock)


def _expired(
    tmp_path, timeout_s: float, on_timeout: str, wait_s: float
) -> tuple[list[str], fx.Submission]:
    """One turn whose question goes unanswered for ``wait_s`` (injected clock) past
    ``timeout_s``: what ran, and how the submission settled."""
    executed: list[str] = []
    clock = FakeClock()

    async def main() -> fx.Submission:
        agent = _agent(executed, timeout_s=timeout_s, on_timeout=on_timeout)
        async with _clocked(tmp_path, agent, clock) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("ship")
            await _asked(rt, sub.id)
            clock.advance(wait_s)
            settled = await s.wait(sub.id, timeout=10)
            await check_invariants(rt, SESSION)
            return settled

    return executed, run(main())


def test_an_unanswered_question_is_denied_at_its_timeout_and_the_model_reads_so(tmp_path):
    executed: list[str] = []
    clock = FakeClock()

    async def main():
        agent = _agent(executed, timeout_s=30)
        async with _clocked(tmp_path, agent, clock) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("ship")
            await _asked(rt, sub.id)
            waiting = submission(rt, sub.id)
            assert question_due_at(waiting) == waiting.input_request.asked_at + 30  # type: ignore[union-attr]
            # Not due: the scan (five times a second) leaves it waiting.
            clock.advance(29)
            assert read(rt, lambda v: orphaned_sessions(v, now=clock.now())) == []
            clock.advance(2)
            assert read(rt, lambda v: orphaned_sessions(v, now=clock.now())) == [SESSION]
            settled = await s.wait(sub.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            (task,) = tasks(rt, sub.id)
            assert task.answer is not None and task.answer.timed_out
            assert (task.status.value, task.result) == ("failed", "denied: no answer within 30s")
            assert event_types(rt, SESSION).count("input.answered") == 1
            with pytest.raises(fx.NoPendingQuestionError):
                await s.answer(fx.allow())  # too late: the expiry answered
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == []


def test_on_timeout_allow_runs_the_call(tmp_path):
    executed, settled = _expired(tmp_path, 5, "allow", 5)
    assert (settled.status.value, settled.result) == ("completed", "done")
    assert executed == ["2.0"]


def test_on_timeout_fail_settles_the_turn_failed_without_running_the_call(tmp_path):
    executed, settled = _expired(tmp_path, 5, "fail", 6)
    assert settled.status.value == "failed"
    assert settled.error is not None and settled.error.code == "question_timeout"
    assert "May I run deploy?" in settled.error.message
    assert executed == []


def test_a_later_message_runs_once_the_question_before_it_expires(tmp_path):
    executed: list[str] = []
    clock = FakeClock()

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if last_user_text(request) == "and then?":
            return fx.reply("second answer")
        if rounds_done(request) == 0:
            return fx.reply("deploying", fx.call("deploy", version="2.0"))
        return fx.reply("done")

    async def main():
        agent = _agent(executed, timeout_s=60, model=fx.ScriptedModel(policy))
        async with _clocked(tmp_path, agent, clock) as rt:
            s = rt.session(SESSION)
            first = await s.submit("ship")
            await _asked(rt, first.id)
            second = await s.submit("and then?")
            assert submission(rt, second.id).status.value == "queued"
            clock.advance(61)
            assert (await s.wait(second.id, timeout=10)).result == "second answer"
            assert submission(rt, first.id).result_text == "done"
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == []


def test_the_local_queue_delays_the_timer_wake_with_no_scan_running(tmp_path):
    """The real clock and no periodic scan: only the timer's delayed wake can fire it."""
    executed: list[str] = []

    async def main():
        agent = _agent(executed, timeout_s=0.3)
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=NO_SCAN) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("ship")
            settled = await s.wait(sub.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            (task,) = tasks(rt, sub.id)
            assert task.answer is not None and task.answer.timed_out

    run(main())
    assert executed == []


def test_a_timer_due_while_no_runtime_ran_fires_when_one_starts(tmp_path):
    executed: list[str] = []
    clock = FakeClock()
    url = db_url(tmp_path)

    async def first():
        agent = _agent(executed, timeout_s=600)
        async with fx.Runtime([agent], store=owned_store(url), settings=NO_SCAN, clock=clock) as rt:
            sub = await rt.session(SESSION).submit("ship")
            await _asked(rt, sub.id)
            return sub.id

    sub_id = run(first())
    clock.advance(3600)  # an hour with no process: the delayed wake died with the first

    async def second():
        agent = _agent(executed, timeout_s=600)
        # No periodic scan: the one a runtime runs as it starts finds the due timer.
        async with fx.Runtime([agent], store=owned_store(url), settings=NO_SCAN, clock=clock) as rt:
            settled = await rt.session(SESSION).wait(sub_id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            await check_invariants(rt, SESSION)

    run(second())
    assert executed == []


def test_on_exhausted_ask_expires_by_the_durability_setting(tmp_path):
    url = db_url(tmp_path)
    clock = FakeClock()
    agent = fx.Agent(
        "eng",
        fx.ScriptedModel([fx.reply("done")]),
        durability=fx.Durability(
            max_attempts=1, on_exhausted="ask", ask_timeout_s=120, ask_on_timeout="allow"
        ),
    )
    crashed = leave_crashed_turn(url, agent="eng", record_model=False)

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST, clock=clock) as rt:
            await _asked(rt, crashed.submission.id)
            request = submission(rt, crashed.submission.id).input_request
            assert request is not None and request.about == "exhausted"
            assert request.expires_at == request.asked_at + 120
            clock.advance(121)
            settled = await rt.session(SESSION).wait(crashed.submission.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")

    run(main())


def test_a_timeout_that_is_not_positive_or_an_unknown_fallback_is_refused():
    with pytest.raises(fx.ConfigurationError, match="timeout_s"):
        fx.ask("May I?", timeout_s=0)
    with pytest.raises(fx.ConfigurationError, match="on_timeout"):
        fx.ask("May I?", timeout_s=5, on_timeout="maybe")  # type: ignore[arg-type]
    with pytest.raises(fx.ConfigurationError, match="ask_timeout_s"):
        fx.Durability(ask_timeout_s=-1)


def test_a_childs_question_expires_and_the_parents_call_goes_on(tmp_path):
    """A subagent's child asks with a timeout and nobody answers: the child's own timer (its
    session's, armed when the inline run lets go of it) denies the lookup, the child answers
    without it, and the parent's call returns that answer. No scan: only the timer's wake."""
    from test_subagents import lead, recording_lookup

    looked_up: list[str] = []

    def ask_first(tool: str, arguments: str) -> fx.Ask | None:
        return fx.ask(f"May I {tool}?", timeout_s=0.3) if tool == "lookup" else None

    child = fx.Agent(
        "researcher",
        fx.ScriptedModel([fx.reply("", fx.call("lookup", topic="a")), fx.reply("a is unknown")]),
        tools=[recording_lookup(looked_up)],
        before_tool=ask_first,
    )
    parent = lead(
        child, fx.ScriptedModel([fx.reply("", fx.call("research", task="a?")), fx.reply("no idea")])
    )

    async def main():
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=NO_SCAN) as rt:
            s = rt.session("p1")
            sub = await s.submit("go")
            assert (await s.wait(sub.id, timeout=10)).result == "no idea"
            (call,) = tasks(rt, sub.id)
            assert call.child_session is not None and call.result == "a is unknown"

    run(main(), timeout=30)
    assert looked_up == []


def _spending_agent(on_timeout: str) -> tuple[fx.Agent, fx.ScriptedModel]:
    """A model that never stops calling a tool (3 output tokens a call) under a 6-token turn
    budget whose question expires after 60 s, answered ``on_timeout``."""

    @fx.tool(replay="safe")
    def note(args: _Note) -> str:
        return "noted"

    model = fx.ScriptedModel(
        lambda request: fx.reply("once more", fx.call("note", text="again")), name="looper"
    )
    spending = fx.SpendingBudget(
        turn_output_tokens=6,
        on_exhausted="ask",
        ask_timeout_s=60,
        ask_on_timeout=on_timeout,  # type: ignore[arg-type]
    )
    return fx.Agent("eng", model, tools=[note], spending=spending), model


class _Note(pydantic.BaseModel):
    text: str


async def _budget_question(rt: fx.Runtime, sub_id: str, asked: int) -> fx.Question:
    """The ``asked``-th budget question of the submission, once its turn let go of it."""
    s = rt.session(SESSION)
    await _until(lambda: _unanswered(rt, sub_id, asked))
    question = await s.question()
    assert question is not None and question.about == "budget"
    return question


def _unanswered(rt: fx.Runtime, sub_id: str, asked: int) -> bool:
    events = read(rt, lambda v: list(v.events(SESSION)))
    waiting = submission(rt, sub_id).input_request
    return (
        sum(1 for e in events if e.type == "input.requested") == asked
        and waiting is not None
        and waiting.answer is None
        and read(rt, lambda v: v.get_session(SESSION)).lease.owner is None
    )


@pytest.mark.parametrize(
    ("on_timeout", "code"), [("deny", "budget_exhausted"), ("fail", "question_timeout")]
)
def test_a_spent_budgets_question_expires_and_the_turn_fails(tmp_path, on_timeout, code):
    clock = FakeClock()
    agent, model = _spending_agent(on_timeout)

    async def main():
        async with _clocked(tmp_path, agent, clock) as rt:
            sub = await rt.session(SESSION).submit("loop")
            await _budget_question(rt, sub.id, asked=1)
            request = submission(rt, sub.id).input_request
            assert request is not None and request.expires_at == request.asked_at + 60
            assert request.on_timeout == on_timeout
            clock.advance(61)
            settled = await rt.session(SESSION).wait(sub.id, timeout=10)
            assert settled.status.value == "failed" and settled.error is not None
            assert settled.error.code == code
            assert "no answer within 60s" in settled.error.message
            assert len(model.requests) == 2  # 3, 6 tokens: spent, and nothing after
            answered = submission(rt, sub.id).input_request
            assert answered is not None and answered.answer is not None
            assert answered.answer.timed_out
            await check_invariants(rt, SESSION)

    run(main())


def test_a_spent_budgets_question_that_expires_allowed_grants_one_more_budget(tmp_path):
    clock = FakeClock()
    agent, model = _spending_agent("allow")

    async def main():
        async with _clocked(tmp_path, agent, clock) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("loop")
            await _budget_question(rt, sub.id, asked=1)
            assert len(model.requests) == 2
            clock.advance(61)
            # The expiry allowed: one more 6-token budget (9, 12), then it asks again.
            await _budget_question(rt, sub.id, asked=2)
            assert len(model.requests) == 4
            await s.answer(fx.deny("enough"))
            settled = await s.wait(sub.id, timeout=10)
            assert settled.error is not None and settled.error.code == "budget_exhausted"
            assert "enough" in settled.error.message and len(model.requests) == 4
            await check_invariants(rt, SESSION)

    run(main())


def test_a_spending_budgets_question_timeout_must_be_positive():
    with pytest.raises(fx.ConfigurationError, match="ask_timeout_s"):
        fx.SpendingBudget(turn_output_tokens=1, on_exhausted="ask", ask_timeout_s=0)
    with pytest.raises(fx.ConfigurationError, match="ask_on_timeout"):
        fx.SpendingBudget(on_exhausted="ask", ask_on_timeout="maybe")  # type: ignore[arg-type]
