"""pydantic-ai's external tools (``ExternalToolset``) as fxdurable questions whose answer is
the call's result (``tool_result(value)``): in process, then with the worker SIGKILLed while
the session is parked on the question, in real processes (``pydai_external.py``)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
from pydai_checks import assert_checked, lines
from pydai_external import asked, build
from test_pydantic_ai_crash import outcome, run

import fxdurable as fx
from fxdurable.adapters.pydantic_ai import tool_result
from fxdurable.backends import open_store

DRIVER = Path(__file__).resolve().with_name("pydai_external.py")
QUESTION = 'Result of price_quote with {"sku":"A1"}?'


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        (tool_result({"price": 42}), 'quote: {"price": 42}'),
        (tool_result("42 EUR"), "quote: 42 EUR"),
        (fx.deny("no price today"), "quote: denied: no price today"),
        (fx.allow(), "quote: NoExternalResultError: price_quote runs outside the agent and was"),
    ],
    ids=["json", "text", "deny", "allow"],
)
def test_an_external_call_parks_on_a_question_whose_answer_is_its_result(
    tmp_path: Path, answer: fx.Answer, text: str
) -> None:
    agent = build(tmp_path)
    assert {t.name: t.policy for t in agent.tools} == {"price_quote": "safe"}

    async def main() -> tuple[str, fx.Submission]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("s")
            sub = await session.submit("quote A1")
            question = await asyncio.wait_for(asked(session), timeout=20)
            assert question.tool == "price_quote" and question.arguments == '{"sku":"A1"}'
            await session.answer(answer)
            return question.question, await session.wait(sub.id, timeout=30)

    question, done = asyncio.run(main())
    assert question == QUESTION
    assert done.status == "completed" and (done.result or "").startswith(text), done.result


def test_a_result_that_is_not_json_is_refused_before_anything_is_written() -> None:
    with pytest.raises(fx.InvalidAnswerError, match="must be JSON"):
        tool_result(object())


@pytest.mark.crash
@pytest.mark.parametrize("crash_at", ["input.after-request:price_quote", None])
def test_a_parked_external_call_survives_a_sigkill_and_completes_once_answered(
    tmp_path: Path, crash_at: str | None
) -> None:
    """Killed just after the question committed (still holding the lease), or while parked
    with the lease let go: the answer given to a new process completes the call, once."""
    store, world = f"sqlite:///{tmp_path}/ext.db", tmp_path / "world"
    world.mkdir()
    code, out, err = run(DRIVER, store, world, crash_at)
    assert code == -signal.SIGKILL, (code, out, err)
    if crash_at is None:
        assert f"question {json.dumps(QUESTION)}" in out, (out, err)
    else:
        assert f"crash injected at {crash_at}" in err, err
    crashed = json.loads(lines(world / "model.log")[-1])["pid"]

    code, out, err = run(DRIVER, store, world, argv=["--answer", '{"price": 42}'])
    assert code == 0 and "Traceback" not in err, (code, out, err)
    assert outcome(out) == {"status": "completed", "text": 'quote: {"price": 42}'}
    requests = [json.loads(x) for x in lines(world / "model.log")]
    # Asked once before the kill; once after, shown the answer as the call's result.
    assert [r["pid"] == crashed for r in requests] == [True, False], requests
    assert requests[1]["shown"] == [["price_quote", '{"price": 42}']]
    opened = open_store(store)
    try:
        (task,) = opened.read(lambda v: v.session_tool_tasks("s"))
        kinds = [e.type for e in opened.read(lambda v: v.events("s"))]
    finally:
        opened.close()
    assert (task.status, task.answer and task.answer.kind) == ("completed", "rewrite")
    assert (kinds.count("input.requested"), kinds.count("input.answered")) == (1, 1), kinds
    assert kinds.count("tool.started") == 1, kinds  # the call ran once
    assert_checked(store, world)
