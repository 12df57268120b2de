"""Spending budgets: a turn (or a session) that has spent its tokens or dollars takes no
further step and settles ``failed`` with ``budget_exhausted``, or asks a person."""

from __future__ import annotations

import asyncio
import io
import random
from pathlib import Path

import pydantic
import pytest
from fxrt_support import FAST, fresh_store, run

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.core.records import TurnRecord, Usage
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.decide import AskExhausted, Boundary, FailTurn, GoOn, at_boundary
from fxdurable.runtime.models.base import ModelRequest
from fxdurable.runtime.models.scripted import ScriptedModel
from fxdurable.runtime.spend import SpendingBudget, overspent


class Note(pydantic.BaseModel):
    text: str


@fx.tool(replay="safe")
def note(args: Note) -> str:
    return "noted"


def looping() -> ScriptedModel:
    """A model that never stops calling a tool: 3 output tokens a call (2 words + 1 call)."""

    def policy(request: ModelRequest) -> fx.ModelResponse:
        return fx.reply("once more", fx.call("note", text="again"))

    return ScriptedModel(policy, name="looper")


def runtime(tmp_path: Path, agent: fx.Agent) -> fx.Runtime:
    return fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST, rng=random.Random(1))


async def failure(s: fx.SessionHandle, prompt: str) -> fx.Submission:
    sub = await s.wait((await s.submit(prompt)).id, timeout=10)
    assert sub.status == "failed", sub
    return sub


def completed_rounds(events: list[fx.EventRecord], turn_id: str) -> int:
    return sum(1 for e in events if e.type == "model.completed" and e.turn_id == turn_id)


def test_a_looping_model_stops_at_the_turn_budget_not_at_the_attempt_limit(
    tmp_path: Path,
) -> None:
    model = looping()
    spending = SpendingBudget(turn_output_tokens=10)
    agent = fx.Agent("a", model, tools=[note], spending=spending)

    async def go() -> None:
        async with runtime(tmp_path, agent) as rt:
            s = rt.session("s")
            sub = await failure(s, "loop")
            assert sub.error is not None and sub.error.code == "budget_exhausted"
            assert "turn_output_tokens=10" in sub.error.message
            assert "used 12 output tokens" in sub.error.message
            # 3, 6, 9 tokens: still under 10, so a 4th call; at 12 no 5th starts.
            assert len(model.requests) == 4
            assert completed_rounds(await s.events(), sub.id) == 4
            out = io.StringIO()
            await asyncio.to_thread(print_trace, rt.journal.store, "s", out)
            assert "turn failed the turn's spending budget turn_output_tokens=10" in out.getvalue()

    run(go())


def test_a_cost_budget_counts_the_priced_calls(tmp_path: Path) -> None:
    model = looping()
    pricing = fx.Pricing(input_per_mtok=0.0, output_per_mtok=1_000_000.0)  # $1 a token
    agent = fx.Agent(
        "a", model, tools=[note], pricing=pricing, spending=SpendingBudget(turn_cost_usd=5.0)
    )

    async def go() -> None:
        async with runtime(tmp_path, agent) as rt:
            sub = await failure(rt.session("s"), "loop")
            assert sub.error is not None and sub.error.code == "budget_exhausted"
            assert "turn_cost_usd=5" in sub.error.message
            assert len(model.requests) == 2  # $3, then $6

    run(go())


def test_a_session_budget_counts_every_turn_and_stops_the_next_one_before_its_call(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(lambda request: fx.reply("one two three four five"), name="m")
    agent = fx.Agent("a", model, spending=SpendingBudget(session_output_tokens=8))

    async def go() -> None:
        async with runtime(tmp_path, agent) as rt:
            s = rt.session("s")
            assert await s.run("first", timeout=10) == "one two three four five"
            # 5 tokens spent: under 8, the second turn may call the model (and answers).
            assert await s.run("second", timeout=10) == "one two three four five"
            sub = await failure(s, "third")  # 10 spent: the third takes no step
            assert sub.error is not None and "session_output_tokens=8" in sub.error.message
            assert len(model.requests) == 2
            record = await s.record()
            assert record is not None and record.spent.output_tokens == 10

    run(go())


def test_a_final_answer_is_kept_even_when_it_spent_past_the_budget(tmp_path: Path) -> None:
    model = ScriptedModel([fx.reply("a long final answer of many words")], name="m")
    agent = fx.Agent("a", model, spending=SpendingBudget(turn_output_tokens=2))

    async def go() -> None:
        async with runtime(tmp_path, agent) as rt:
            text = await rt.session("s").run("hi", timeout=10)
            assert text == "a long final answer of many words"

    run(go())


def test_ask_grants_one_more_budget_per_allow_and_deny_fails(tmp_path: Path) -> None:
    model = looping()
    spending = SpendingBudget(turn_output_tokens=6, on_exhausted="ask")
    agent = fx.Agent("a", model, tools=[note], spending=spending)

    async def waits(s: fx.SessionHandle, sub_id: str) -> fx.Question:
        for _ in range(500):
            question = await s.question()
            if question is not None:
                return question
            await asyncio.sleep(0.02)
        raise AssertionError("the turn never asked")

    async def go() -> None:
        async with runtime(tmp_path, agent) as rt:
            s = rt.session("s")
            sub = await s.submit("loop")
            question = await waits(s, sub.id)
            assert question.about == "budget" and "turn_output_tokens=6" in question.question
            assert len(model.requests) == 2  # 3, 6: spent
            await s.answer(fx.allow())
            question = await waits(s, sub.id)
            assert len(model.requests) == 4  # one more budget: 9, 12
            assert "2 budgets granted" in question.question
            await s.answer(fx.deny("too expensive"))
            settled = await s.wait(sub.id, timeout=10)
            assert settled.status == "failed" and settled.error is not None
            assert settled.error.code == "budget_exhausted"
            assert "too expensive" in settled.error.message
            assert len(model.requests) == 4

    run(go())


def test_the_boundary_decides_on_the_overspent_fact() -> None:
    base = Boundary(abort=False, timed_out=False, timeout_s=60, stop_reason=None)
    assert isinstance(at_boundary(base), GoOn)
    spent = Boundary(
        abort=False, timed_out=False, timeout_s=60, stop_reason=None, overspent="the turn's x"
    )
    failed = at_boundary(spent)
    assert isinstance(failed, FailTurn) and failed.code == "budget_exhausted"
    asking = Boundary(
        abort=False,
        timed_out=False,
        timeout_s=60,
        stop_reason=None,
        overspent="the turn's x",
        on_overspent="ask",
    )
    asked = at_boundary(asking)
    assert isinstance(asked, AskExhausted) and asked.about == "budget"
    aborted = Boundary(abort=True, timed_out=False, timeout_s=60, stop_reason=None, overspent="x")
    assert not isinstance(at_boundary(aborted), FailTurn)  # an abort wins over every budget


def test_overspent_reads_the_totals_on_the_turn_record() -> None:
    turn = TurnRecord(
        id="t",
        session_id="s",
        submission_id="t",
        status="running",  # type: ignore[arg-type]
        spent=Usage(input_tokens=50, output_tokens=5),
        session_spent=Usage(input_tokens=500, output_tokens=50),
    )
    assert overspent(None, turn) is None
    assert overspent(SpendingBudget(turn_input_tokens=51), turn) is None
    assert "turn_input_tokens=50" in (overspent(SpendingBudget(turn_input_tokens=50), turn) or "")
    assert "session's" in (overspent(SpendingBudget(session_output_tokens=40), turn) or "")
    granted = TurnRecord(**{**_fields(turn), "spend_grants": 1})
    assert overspent(SpendingBudget(turn_input_tokens=30), granted) is None  # 50 < 2 x 30


def _fields(turn: TurnRecord) -> dict[str, object]:
    return {name: getattr(turn, name) for name in TurnRecord.__dataclass_fields__}


def test_budgets_refuse_what_they_could_not_check() -> None:
    with pytest.raises(ConfigurationError, match="no Pricing"):
        fx.Agent("a", looping(), spending=SpendingBudget(session_cost_usd=1.0))
    with pytest.raises(ConfigurationError, match="positive"):
        SpendingBudget(turn_input_tokens=0)
