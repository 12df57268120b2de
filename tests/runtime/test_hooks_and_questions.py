"""Tool hooks: ``after_tool`` and permission prompts (``before_tool`` returning ``fx.ask``).

A question is a durable ``needs_input`` state: the call has no intent recorded, the attempt
ended with the question, the lease is free, and nothing runs the submission until
``session.answer(allow() | deny(reason) | rewrite(input))``. ``Durability(on_exhausted="ask")``
asks the same way when a turn's attempts run out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import time
from collections.abc import Callable

import pydantic
import pytest
from fxrt_support import (
    FAST,
    check_invariants,
    db_url,
    event_types,
    events,
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

import fxdurable as fx
from fxdurable.cli.render import Style, describe
from fxdurable.core.records import EventRecord, InputAnswer, ToolCallRequest
from fxdurable.core.states import AttemptStatus, ToolTaskStatus
from fxdurable.errors import IllegalTransitionError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock
from fxdurable.testing.invariants import check_store

SESSION = "s1"


class Deploy(pydantic.BaseModel):
    version: str


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def _deploy_tool(executed: list[str], *, fail: bool = False) -> fx.Tool:
    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy a release."
        executed.append(inp.version)
        if fail:
            raise RuntimeError(f"deploy of {inp.version} broke, token=SECRET-42")
        return f"deployed {inp.version} with token=SECRET-42"

    return deploy


def _deploy_model(version: str = "2.0") -> fx.ScriptedModel:
    return fx.ScriptedModel(
        [fx.reply("deploying", fx.call("deploy", version=version)), fx.reply("done")]
    )


def _asking_agent(
    executed: list[str], asked: list[str], model: fx.ScriptedModel | None = None
) -> fx.Agent:
    def before_tool(tool: str, arguments: str) -> fx.Ask | None:  # a sync hook
        asked.append(tool)
        return fx.ask(f"May I run {tool} with {arguments}?")

    return fx.Agent(
        "eng", model or _deploy_model(), tools=[_deploy_tool(executed)], before_tool=before_tool
    )


async def _waiting(rt: fx.Runtime, sub_id: str) -> fx.Submission:
    handle = rt.session(SESSION)
    await _until(lambda: submission(rt, sub_id).input_request is not None)
    await _until(lambda: read(rt, lambda v: v.get_session(SESSION)).lease.owner is None)
    found = await handle.submission(sub_id)
    assert found is not None
    return found


async def _ship_and_wait_for_the_question(
    rt: fx.Runtime,
) -> tuple[fx.SessionHandle, fx.Submission]:
    s = rt.session(SESSION)
    sub = await s.submit("ship")
    await _waiting(rt, sub.id)
    return s, sub


# -- after_tool --------------------------------------------------------------------------------


def test_after_tool_replaces_the_result_the_model_reads_and_the_record_keeps(tmp_path):
    executed: list[str] = []
    seen: list[fx.ToolCall] = []

    async def after_tool(call: fx.ToolCall, result: str) -> str | None:
        seen.append(call)
        return result.replace("SECRET-42", "[redacted]")

    model = _deploy_model()
    agent = fx.Agent("eng", model, tools=[_deploy_tool(executed)], after_tool=after_tool)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            sub = await rt.session(SESSION).submit("ship")
            assert (await rt.session(SESSION).wait(sub.id, timeout=10)).result == "done"
            (task,) = tasks(rt, sub.id)
            assert task.result == "deployed 2.0 with token=[redacted]"
            assert [m.text for m in model.requests[1].messages if m.role == "tool"] == [
                "deployed 2.0 with token=[redacted]"
            ]
            (completed,) = [e for e in events(rt, SESSION) if e.type == "tool.completed"]
            assert completed.data["result"] == "deployed 2.0 with token=[redacted]"
            assert [(c.tool, c.status.value, c.task_id) for c in seen] == [
                ("deploy", "completed", task.id)
            ]
            assert seen[0].arguments == task.arguments
            assert seen[0].execution_id == task.execution_id
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == ["2.0"]


def test_after_tool_returning_none_keeps_the_result_and_runs_on_a_raising_tool(tmp_path):
    executed: list[str] = []
    statuses: list[str] = []

    def after_tool(call: fx.ToolCall, result: str) -> None:  # a sync hook
        statuses.append(call.status.value)

    agent = fx.Agent(
        "eng", _deploy_model(), tools=[_deploy_tool(executed, fail=True)], after_tool=after_tool
    )

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            sub = await rt.session(SESSION).submit("ship")
            await rt.session(SESSION).wait(sub.id, timeout=10)
            (task,) = tasks(rt, sub.id)
            assert task.status.value == "failed"
            assert task.result == "RuntimeError: deploy of 2.0 broke, token=SECRET-42"

    run(main())
    assert statuses == ["failed"]


def test_a_raising_after_tool_is_logged_without_secrets_and_keeps_the_result(tmp_path, caplog):
    executed: list[str] = []

    async def after_tool(call: fx.ToolCall, result: str) -> str:
        raise ValueError(f"cannot annotate {result} for {call.arguments}")

    agent = fx.Agent("eng", _deploy_model(), tools=[_deploy_tool(executed)], after_tool=after_tool)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            sub = await rt.session(SESSION).submit("ship")
            settled = await rt.session(SESSION).wait(sub.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            (task,) = tasks(rt, sub.id)
            assert task.result == "deployed 2.0 with token=SECRET-42"  # the effect happened
            assert task.runs == 1
            return task.id

    with caplog.at_level(logging.WARNING, logger="fxdurable"):
        task_id = run(main())
    (line,) = [r.getMessage() for r in caplog.records if "after_tool" in r.getMessage()]
    assert "ValueError" in line and "deploy" in line and task_id in line
    assert "SECRET" not in caplog.text and "2.0" not in line
    assert executed == ["2.0"]


def test_after_tool_does_not_run_for_a_call_that_never_executed(tmp_path):
    calls: list[str] = []

    def after_tool(call: fx.ToolCall, result: str) -> str:
        calls.append(call.tool)
        return "rewritten"

    agent = fx.Agent(
        "eng",
        _deploy_model(),
        tools=[_deploy_tool([])],
        before_tool=lambda tool, arguments: "frozen",
        after_tool=after_tool,
    )

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            sub = await rt.session(SESSION).submit("ship")
            await rt.session(SESSION).wait(sub.id, timeout=10)
            (task,) = tasks(rt, sub.id)
            assert (task.status.value, task.result) == ("failed", "denied: frozen")

    run(main())
    assert calls == []


# -- ask and answer ----------------------------------------------------------------------------


def test_ask_waits_durably_with_no_intent_no_attempt_and_no_lease_then_allow_runs_once(
    tmp_path,
):
    executed: list[str] = []
    asked: list[str] = []
    agent = _asking_agent(executed, asked)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("ship")
            waiting = await _waiting(rt, sub.id)
            assert waiting.needs_input and waiting.status.value == "running"
            assert waiting.question == 'May I run deploy with {"version": "2.0"}?'
            question = await s.question()
            assert question is not None
            (task,) = tasks(rt, sub.id)
            assert (question.about, question.tool, question.task_id) == (
                "tool",
                "deploy",
                task.id,
            )
            assert question.arguments == task.arguments
            assert (task.status.value, task.runs) == ("pending", 0)  # no intent
            (attempt,) = read(rt, lambda v: v.attempts(sub.id))
            assert (attempt.status.value, attempt.reason) == ("yielded", "needs input")
            # The scan runs five times a second: nothing picks the waiting turn up.
            before = event_types(rt, SESSION)
            await asyncio.sleep(0.6)
            assert event_types(rt, SESSION) == before
            assert before[-2:] == ["attempt.yielded", "input.requested"]
            requested = events(rt, SESSION)[-1]
            assert requested.data == {
                "question": 'May I run deploy with {"version": "2.0"}?',
                "about": "tool",
                "task": task.id,
                "tool": "deploy",
                "round": 0,
                "index": 0,
            }
            assert executed == []

            answered = await s.answer(fx.allow())
            assert not answered.needs_input
            settled = await s.wait(sub.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            assert settled.interruptions == 0  # a wait is not an interruption
            (task,) = tasks(rt, sub.id)
            assert (task.status.value, task.runs) == ("completed", 1)
            assert task.answer is not None and task.answer.kind == "allow"
            (answer_event,) = [e for e in events(rt, SESSION) if e.type == "input.answered"]
            assert answer_event.data == {
                "answer": "allow",
                "about": "tool",
                "task": task.id,
                "tool": "deploy",
            }
            traced = [
                describe(e, Style(io.StringIO()))
                for e in events(rt, SESSION)
                if e.type.startswith("input.") or e.data.get("reason") == "needs input"
            ]
            assert traced == [
                "attempt 1 ended: the turn waits for an answer",
                'asks a person (about deploy r0.t0): May I run deploy with {"version": "2.0"}?',
                "answered allow",
            ]
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == ["2.0"]
    assert asked == ["deploy"]  # the hook is not asked again for an answered call


def test_deny_records_the_refusal_and_never_runs_the_call(tmp_path):
    executed: list[str] = []
    model = _deploy_model()
    agent = _asking_agent(executed, [], model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s, sub = await _ship_and_wait_for_the_question(rt)
            await s.answer(fx.deny("not on a Friday"))
            assert (await s.wait(sub.id, timeout=10)).result == "done"
            (task,) = tasks(rt, sub.id)
            assert (task.status.value, task.runs) == ("failed", 0)
            assert task.result == "denied: not on a Friday"
            assert [m.text for m in model.requests[1].messages if m.role == "tool"] == [
                "denied: not on a Friday"
            ]
            (answered,) = [e for e in events(rt, SESSION) if e.type == "input.answered"]
            assert answered.data["reason"] == "not on a Friday"
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == []


def test_rewrite_runs_the_call_with_the_new_input_and_records_it(tmp_path):
    executed: list[str] = []
    agent = _asking_agent(executed, [])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s, sub = await _ship_and_wait_for_the_question(rt)
            await s.answer(fx.rewrite({"version": "2.0-canary"}))
            await s.wait(sub.id, timeout=10)
            (task,) = tasks(rt, sub.id)
            assert task.arguments == '{"version": "2.0-canary"}'
            assert task.answer is not None and task.answer.arguments == task.arguments
            assert task.result == "deployed 2.0-canary with token=SECRET-42"
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == ["2.0-canary"]


def test_a_bad_answer_writes_nothing_and_the_question_still_waits(tmp_path):
    executed: list[str] = []
    agent = _asking_agent(executed, [])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session(SESSION)
            with pytest.raises(fx.SessionNotFoundError):
                await s.answer(fx.allow())  # no session yet
            sub = await s.submit("ship")
            await _waiting(rt, sub.id)
            before = event_types(rt, SESSION)
            with pytest.raises(fx.InvalidAnswerError, match="does not fit deploy"):
                await s.answer(fx.rewrite({"version": 2, "force": True}))
            with pytest.raises(fx.InvalidAnswerError):
                await s.answer("yes")  # type: ignore[arg-type]
            assert event_types(rt, SESSION) == before
            assert (await s.submission(sub.id)).needs_input  # type: ignore[union-attr]
            await s.answer(fx.allow())
            with pytest.raises(fx.NoPendingQuestionError):
                await s.answer(fx.allow())  # answered already: the first answer applies
            await s.wait(sub.id, timeout=10)
            with pytest.raises(fx.NoPendingQuestionError):
                await s.answer(fx.deny("too late"))
            assert [t for t in event_types(rt, SESSION) if t == "input.answered"] == [
                "input.answered"
            ]

    run(main())
    assert executed == ["2.0"]


def test_two_calls_of_one_round_are_asked_about_one_after_the_other(tmp_path):
    """Each call gets its own question, asked once its turn comes; steering typed while the
    turn waits reaches the model's next call."""
    executed: list[str] = []

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        # The whole conversation, not the turn's: the steering is a user message too.
        if any(m.role == "tool" for m in request.messages):
            return fx.reply("done")
        return fx.reply("two", fx.call("deploy", version="a"), fx.call("deploy", version="b"))

    model = fx.ScriptedModel(policy)
    agent = _asking_agent(executed, [], model)
    url = db_url(tmp_path)

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            s, sub = await _ship_and_wait_for_the_question(rt)
            first = await s.question()
            assert first is not None and first.arguments == '{"version": "a"}'
            assert (await s.steer("use the canary")).steered
            await s.answer(fx.allow())
            await _until(lambda: submission(rt, sub.id).input_request.task_id != first.task_id)
            await _waiting(rt, sub.id)
            second = await s.question()
            assert second is not None and second.arguments == '{"version": "b"}'
            await s.answer(fx.deny("one is enough"))
            assert (await s.wait(sub.id, timeout=10)).result == "done"
            results = [t.result for t in tasks(rt, sub.id)]
            assert results == ["deployed a with token=SECRET-42", "denied: one is enough"]
            assert event_types(rt, SESSION).count("input.requested") == 2
            assert "use the canary" in [m.text for m in model.requests[-1].messages]
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == ["a"]
    store = SqliteStore(url)
    try:
        assert store.read(lambda v: check_store(v, now=time.time(), at_rest=True)).violations == ()
    finally:
        store.close()


def test_later_submissions_wait_behind_a_question(tmp_path):
    executed: list[str] = []

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if last_user_text(request) == "and then?":
            return fx.reply("second answer")
        if rounds_done(request) == 0:
            return fx.reply("deploying", fx.call("deploy", version="2.0"))
        return fx.reply("done")

    agent = _asking_agent(executed, [], fx.ScriptedModel(policy))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session(SESSION)
            first = await s.submit("ship")
            await _waiting(rt, first.id)
            second = await s.submit("and then?")
            await asyncio.sleep(0.3)
            assert submission(rt, second.id).status.value == "queued"
            with pytest.raises(fx.AgentBusyError):
                await s.submit("reject me", when_busy="reject")
            await s.answer(fx.allow())
            assert (await s.wait(second.id, timeout=10)).result == "second answer"
            assert submission(rt, first.id).result_text == "done"
            await check_invariants(rt, SESSION)

    run(main())


def test_an_abort_while_waiting_settles_aborted_and_never_runs_the_call(tmp_path):
    executed: list[str] = []
    agent = _asking_agent(executed, [])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s, sub = await _ship_and_wait_for_the_question(rt)
            assert await s.abort() == [sub.id]
            settled = await s.wait(sub.id, timeout=10)
            assert settled.status.value == "aborted" and not settled.needs_input
            (task,) = tasks(rt, sub.id)
            assert (task.status.value, task.runs) == ("cancelled", 0)
            with pytest.raises(fx.NoPendingQuestionError):
                await s.answer(fx.allow())
            await check_invariants(rt, SESSION)

    run(main())
    assert executed == []


def test_the_question_outlives_the_runtime_that_asked_it(tmp_path):
    executed: list[str] = []
    asked: list[str] = []
    url = db_url(tmp_path)

    async def ask_then_close() -> str:
        agent = _asking_agent(executed, asked)
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session(SESSION).submit("ship")
            await _waiting(rt, sub.id)
            return sub.id

    sub_id = run(ask_then_close())

    async def answer_in_another() -> None:
        agent = _asking_agent(executed, asked)
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            s = rt.session(SESSION)
            await asyncio.sleep(0.3)  # its start-up reconciliation and scans: no new attempt
            assert [e for e in event_types(rt, SESSION) if e == "attempt.started"] == [
                "attempt.started"
            ]
            await s.answer(fx.allow())
            assert (await s.wait(sub_id, timeout=10)).result == "done"
            await check_invariants(rt, SESSION)

    run(answer_in_another())
    assert executed == ["2.0"] and asked == ["deploy"]


def test_the_wait_for_an_answer_does_not_count_against_the_time_budget(tmp_path):
    executed: list[str] = []
    clock = FakeClock()
    agent = _asking_agent(executed, [])
    agent = fx.Agent(
        "eng",
        agent.model,
        tools=agent.tools,
        before_tool=agent.before_tool,
        durability=fx.Durability(timeout_s=60),
    )

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, clock=clock
        ) as rt:
            s, sub = await _ship_and_wait_for_the_question(rt)
            started = submission(rt, sub.id).started_at
            clock.advance(3600)  # a person answers an hour later
            await s.answer(fx.allow())
            assert submission(rt, sub.id).started_at == started + 3600
            settled = await s.wait(sub.id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")

    run(main())
    assert executed == ["2.0"]


# -- on_exhausted="ask" ------------------------------------------------------------------------


def _exhausted(tmp_path, on_exhausted: str) -> tuple[str, fx.Agent, list[str], str]:
    """A turn whose one attempt a crash cut short, for an agent with ``max_attempts=1``."""
    url = db_url(tmp_path)
    executed: list[str] = []
    model = fx.ScriptedModel([fx.reply("done")])
    agent = fx.Agent(
        "eng",
        model,
        tools=[_deploy_tool(executed)],
        durability=fx.Durability(max_attempts=1, on_exhausted=on_exhausted),  # type: ignore[arg-type]
    )
    crashed = leave_crashed_turn(url, agent="eng", record_model=False)
    return url, agent, executed, crashed.submission.id


def test_on_exhausted_ask_asks_instead_of_failing_and_allow_grants_a_fresh_budget(tmp_path):
    url, agent, _, sub_id = _exhausted(tmp_path, "ask")

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            s = rt.session(SESSION)
            waiting = await _waiting(rt, sub_id)
            assert waiting.interruptions == 1 and waiting.needs_input
            assert "interrupted 1 times" in (waiting.question or "")
            question = await s.question()
            assert question is not None
            assert (question.about, question.tool, question.task_id) == ("exhausted", None, None)
            with pytest.raises(fx.InvalidAnswerError, match="not a tool call"):
                await s.answer(fx.rewrite({"version": "x"}))
            again = await s.answer(fx.allow())
            assert again.interruptions == 0
            settled = await s.wait(sub_id, timeout=10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            types = event_types(rt, SESSION)
            assert types.count("input.requested") == 1 and "submission.failed" not in types
            await check_invariants(rt, SESSION)

    run(main())


def test_on_exhausted_ask_then_deny_settles_failed_as_fail_would(tmp_path):
    url, agent, _, sub_id = _exhausted(tmp_path, "ask")

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            s = rt.session(SESSION)
            await _waiting(rt, sub_id)
            await s.answer(fx.deny("stop retrying"))
            settled = await s.wait(sub_id, timeout=10)
            assert settled.status.value == "failed"
            assert settled.error is not None and settled.error.code == "attempts_exhausted"
            assert "stop retrying" in settled.error.message
            await check_invariants(rt, SESSION)

    run(main())


def test_on_exhausted_fail_is_the_default(tmp_path):
    assert fx.Durability().on_exhausted == "fail"
    with pytest.raises(fx.ConfigurationError, match="on_exhausted"):
        fx.Durability(on_exhausted="maybe")  # type: ignore[arg-type]
    url, agent, _, sub_id = _exhausted(tmp_path, "fail")

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            settled = await rt.session(SESSION).wait(sub_id, timeout=10)
            assert settled.status.value == "failed"
            assert "input.requested" not in event_types(rt, SESSION)

    run(main())


# -- the journal's unhappy paths ---------------------------------------------------------------


def test_the_journal_refuses_a_question_about_a_started_call_and_an_attempt_unanswered(tmp_path):
    url = db_url(tmp_path)
    call = ToolCallRequest(name="deploy", arguments='{"version": "1"}')

    def ask_about_running(journal, fence):
        sub = journal.read(lambda v: v.unsettled_submissions(SESSION))[0]
        task = journal.read(lambda v: v.tool_tasks(sub.id))[0]
        with pytest.raises(IllegalTransitionError):
            journal.request_input(fence, sub.id, question="?", about="tool", task_id=task.id)

    leave_crashed_turn(
        url, agent="eng", calls=[call], policies=["unsafe"], running=[0], after=ask_about_running
    )

    def ask_then_begin(journal, fence):
        sub = journal.read(lambda v: v.unsettled_submissions("s2"))[0]
        task = journal.read(lambda v: v.tool_tasks(sub.id))[0]
        journal.request_input(fence, sub.id, question="?", about="tool", task_id=task.id)
        with pytest.raises(IllegalTransitionError):
            journal.request_input(fence, sub.id, question="again?", about="tool", task_id=task.id)
        with pytest.raises(IllegalTransitionError):
            journal.begin_attempt(fence, sub.id, worker="w")
        assert journal.release(fence) is False  # no work a wake could do

    leave_crashed_turn(
        url,
        agent="eng",
        session_id="s2",
        calls=[call],
        policies=["unsafe"],
        after=ask_then_begin,
    )


# -- the checker (fxdurable check) -------------------------------------------------------------


def test_the_checker_accepts_a_waiting_turn_and_flags_broken_questions(tmp_path):
    """``check_store``: a turn waiting for an answer is at rest (no violation, even with
    ``at_rest``); records forged past the journal, which refuses to write them, are flagged:
    a waiting call that started, a waiting turn with an attempt running, an answer with no
    question, a call carrying an answer without its event."""
    url = db_url(tmp_path)

    async def ask() -> str:
        async with fx.Runtime([_asking_agent([], [])], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session(SESSION).submit("ship")
            await _waiting(rt, sub.id)
            return sub.id

    sub_id = run(ask())
    store = SqliteStore(url)
    try:
        summary = store.read(lambda v: check_store(v, now=time.time(), at_rest=True))
        assert summary.violations == ()
        sub = store.read(lambda v: v.get_submission(sub_id))
        (task,) = store.read(lambda v: v.tool_tasks(sub_id))
        (attempt,) = store.read(lambda v: v.attempts(sub_id))
        session = store.read(lambda v: v.get_session(SESSION))
        answer = InputAnswer(kind="allow", at=1.0)

        def forge(tx):
            tx.put_tool_task(
                dataclasses.replace(
                    task, status=ToolTaskStatus.RUNNING, runs=1, answer=answer, version=9
                ),
                expected_version=task.version,
            )
            tx.put_attempt(
                dataclasses.replace(attempt, status=AttemptStatus.RUNNING, version=9),
                expected_version=attempt.version,
            )
            tx.append_event(
                EventRecord(
                    session_id=SESSION,
                    seq=session.next_event_seq,
                    type="input.answered",
                    turn_id="sub-elsewhere",
                    data={"answer": "allow", "about": "exhausted"},
                    at=1.0,
                )
            )
            tx.put_session(
                dataclasses.replace(
                    session, next_event_seq=session.next_event_seq + 1, version=session.version + 1
                ),
                expected_version=session.version,
            )

        store.transact(forge)
        summary = store.read(lambda v: check_store(v, now=time.time()))
        codes = sorted(v.code for v in summary.violations)
        assert codes == [
            "answer-without-event",
            "answer-without-question",
            "waiting-attempt-running",
            "waiting-call-started",
        ], summary.violations
        assert sub is not None and sub.input_request is not None
    finally:
        store.close()
