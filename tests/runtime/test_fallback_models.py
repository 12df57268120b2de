"""Fallback models in the turn loop: which failures move a turn to the next model, that the
switch is recorded (the turn, the model call, a ``model.fallback`` event, the trace), that the
turn stays on it, and that the next turn starts on the primary again."""

from __future__ import annotations

import asyncio
import io
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pydantic
import pytest
from fxrt_support import FAST, fresh_store, run

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.core.records import ToolCallRequest
from fxdurable.core.store import ReadView
from fxdurable.errors import (
    ConfigurationError,
    ModelError,
    ModelOverloadedError,
    ModelRetryableError,
    SubmissionFailedError,
)
from fxdurable.runtime.models.base import ChatMessage, Finish, ModelRequest, TextDelta
from fxdurable.runtime.models.fallback import Fallback, dropped_parts, next_model, wire_of
from fxdurable.runtime.models.scripted import ScriptedModel, turn_messages


class Note(pydantic.BaseModel):
    text: str


@fx.tool(replay="safe")
def note(args: Note) -> str:
    return f"noted {args.text}"


class Failing:
    """Raises its queued errors, one per call, then answers like ``inner``; counts calls."""

    def __init__(self, name: str, errors: Sequence[Exception], inner: ScriptedModel) -> None:
        self._name = name
        self.errors = list(errors)
        self.inner = inner
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | Finish]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        async for part in self.inner.stream(request):
            yield part


def note_then_answer(answer: str) -> ScriptedModel:
    """Round 0 calls ``note``; once its result is in, the final answer."""

    def policy(request: ModelRequest) -> fx.ModelResponse:
        if any(m.role == "tool" for m in turn_messages(request)):
            return fx.reply(answer)
        return fx.reply("", fx.call("note", text="x"))

    return ScriptedModel(policy, name="inner")


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def runtime(tmp_path: Path, agent: fx.Agent, sleeps: Sleeps) -> fx.Runtime:
    return fx.Runtime(
        [agent], store=fresh_store(tmp_path), settings=FAST, sleep=sleeps, rng=random.Random(3)
    )


def fallbacks(events: Sequence[fx.EventRecord]) -> list[tuple[str, str]]:
    return [
        (str(e.data["from_model"]), str(e.data["to_model"]))
        for e in events
        if e.type == "model.fallback"
    ]


def test_an_overloaded_primary_switches_at_once_and_the_turn_stays_on_the_backup(
    tmp_path: Path,
) -> None:
    primary = Failing("primary", [ModelOverloadedError("529 overloaded")], note_then_answer("p"))
    backup = Failing("backup", [], note_then_answer("from backup"))
    sleeps = Sleeps()
    agent = fx.Agent("a", [primary, backup], tools=[note])

    async def go() -> None:
        async with runtime(tmp_path, agent, sleeps) as rt:
            s = rt.session("s")
            assert await s.run("hi", timeout=10) == "from backup"
            # One failed call of the primary, then both rounds on the backup; no backoff.
            assert (primary.calls, backup.calls) == (1, 2)
            assert sleeps.delays == []
            events = await s.events()
            assert fallbacks(events) == [("primary", "backup")]
            (switch,) = [e for e in events if e.type == "model.fallback"]
            assert "ModelOverloadedError" in str(switch.data["reason"])
            assert switch.data["dropped_parts"] == 0
            answered = [e.data["model"] for e in events if e.type == "model.completed"]
            assert answered == ["backup", "backup"]

            turn_id = str(switch.turn_id)

            def calls(view: ReadView) -> list[str | None]:
                return [c.model for c in view.model_calls(turn_id)]

            assert await asyncio.to_thread(rt.journal.read, calls) == ["backup", "backup"]
            turn = await asyncio.to_thread(rt.journal.read, lambda v: v.get_turn(turn_id))
            assert turn is not None and turn.model == "backup"  # what a recovery reads

            # The next turn starts on the primary again (it answers this time).
            primary.inner = ScriptedModel([fx.reply("primary is back")])
            assert await s.run("again", timeout=10) == "primary is back"
            assert primary.calls == 2 and backup.calls == 2

            out = io.StringIO()
            await asyncio.to_thread(print_trace, rt.journal.store, "s", out)
            assert "model fallback in round 0: primary → backup" in out.getvalue()

    run(go())


def test_spent_retries_move_the_turn_on_instead_of_failing_it(tmp_path: Path) -> None:
    errors = [ModelRetryableError("503 a"), ModelRetryableError("503 b")]
    primary = Failing("primary", errors, note_then_answer("p"))
    backup = Failing("backup", [], ScriptedModel([fx.reply("backup answers")]))
    sleeps = Sleeps()
    durability = fx.Durability(model_retries=fx.ModelRetries(budget=1, base_s=0.5))
    agent = fx.Agent("a", Fallback(primary, backup, on=()), durability=durability)

    async def go() -> None:
        async with runtime(tmp_path, agent, sleeps) as rt:
            s = rt.session("s")
            assert await s.run("hi", timeout=10) == "backup answers"
            assert primary.calls == 2 and backup.calls == 1
            assert len(sleeps.delays) == 1  # one backoff, then the budget is spent: switch
            events = await s.events()
            assert [e.data["errors"] for e in events if e.type == "model.error"] == [1, 2]
            (switch,) = [e for e in events if e.type == "model.fallback"]
            assert "retries were spent" in str(switch.data["reason"])

    run(go())


def test_a_permanent_error_switches_only_when_the_chain_lists_it(tmp_path: Path) -> None:
    def agent(on: tuple[type[ModelError], ...]) -> tuple[fx.Agent, Failing]:
        primary = Failing("primary", [ModelError("HTTP 404 model not found")], ScriptedModel([]))
        backup = Failing("backup", [], ScriptedModel([fx.reply("ok")]))
        return fx.Agent("a", Fallback(primary, backup, on=on)), backup

    async def go() -> None:
        listed, backup = agent((ModelOverloadedError, ModelError))
        async with runtime(tmp_path / "listed", listed, Sleeps()) as rt:
            assert await rt.session("s").run("hi", timeout=10) == "ok"
            assert backup.calls == 1
        unlisted, unused = agent((ModelOverloadedError,))
        async with runtime(tmp_path / "unlisted", unlisted, Sleeps()) as rt:
            with pytest.raises(SubmissionFailedError) as failed:
                await rt.session("s").run("hi", timeout=10)
            assert failed.value.error["code"] == "model_error"
            assert unused.calls == 0

    (tmp_path / "listed").mkdir()
    (tmp_path / "unlisted").mkdir()
    run(go())


def test_the_last_model_of_the_chain_fails_as_a_single_model_does(tmp_path: Path) -> None:
    primary = Failing("primary", [ModelOverloadedError("429")], ScriptedModel([]))
    backup = Failing("backup", [ModelError("HTTP 400 bad request")], ScriptedModel([]))
    agent = fx.Agent("a", [primary, backup])

    async def go() -> None:
        async with runtime(tmp_path, agent, Sleeps()) as rt:
            s = rt.session("s")
            with pytest.raises(SubmissionFailedError, match="HTTP 400"):
                await s.run("hi", timeout=10)
            assert fallbacks(await s.events()) == [("primary", "backup")]

    run(go())


def test_next_model_decides_from_the_error_and_the_member_the_turn_is_on() -> None:
    a, b, c = (ScriptedModel([], name=n) for n in "abc")
    chain = Fallback(a, b, c)
    overloaded = ModelOverloadedError("529")
    switch = next_model(chain, None, overloaded, retries_spent=False)
    assert switch is not None and switch.to is b
    switch = next_model(chain, "b", overloaded, retries_spent=False)
    assert switch is not None and switch.to is c
    assert next_model(chain, "c", overloaded, retries_spent=False) is None  # the last one
    transient = ModelRetryableError("500")
    assert next_model(chain, "a", transient, retries_spent=False) is None  # retried first
    assert next_model(chain, "a", transient, retries_spent=True) is not None
    patient = Fallback(a, b, when_retries_exhausted=False)
    assert next_model(patient, "a", transient, retries_spent=True) is None
    assert next_model(a, None, overloaded, retries_spent=False) is None  # not a chain
    # A name the chain no longer has (a redeploy): the turn counts as on the primary.
    switch = next_model(chain, "gone", overloaded, retries_spent=False)
    assert switch is not None and switch.to is b


def test_a_chain_refuses_what_it_could_not_record() -> None:
    with pytest.raises(ConfigurationError, match="distinct names"):
        Fallback(ScriptedModel([]), ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="at least two"):
        Fallback(ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="ModelError classes"):
        Fallback(ScriptedModel([], name="x"), ScriptedModel([]), on=(ValueError,))  # type: ignore[arg-type]


def test_a_switch_to_another_wire_counts_the_reasoning_it_cannot_send() -> None:
    from fxdurable.runtime.models.anthropic import AnthropicModel
    from fxdurable.runtime.models.openai import OpenAIModel

    claude = AnthropicModel("claude-x", api_key="k", base_url="http://127.0.0.1:9")
    gpt = OpenAIModel("gpt-x", api_key="k", base_url="http://127.0.0.1:9")
    assert (wire_of(claude), wire_of(gpt), wire_of(ScriptedModel([]))) == (
        "anthropic",
        "openai-chat",
        None,
    )
    thinking = (
        {"type": "thinking", "thinking": "hmm", "signature": "c2ln"},
        {"type": "tool_use", "id": "t1", "name": "note", "input": {}},
    )
    call = ToolCallRequest(name="note", arguments="{}", wire="anthropic", parts=thinking)
    messages = [
        ChatMessage(role="user", text="hi"),
        ChatMessage(role="assistant", text="", tool_calls=(call,)),
    ]
    assert dropped_parts(messages, gpt) == 2
    assert dropped_parts(messages, claude) == 0


def test_a_chain_outside_the_runtime_moves_on_before_anything_streamed() -> None:
    primary = Failing("primary", [ModelOverloadedError("529")], ScriptedModel([]))
    backup = Failing("backup", [], ScriptedModel([fx.reply("hello")]))
    chain = Fallback(primary, backup)
    assert chain.name == "fallback(primary, backup)"

    async def go() -> list[object]:
        request = ModelRequest(instructions="", messages=[ChatMessage(role="user", text="hi")])
        return [part async for part in chain.stream(request)]

    parts = run(go())
    finish = parts[-1]
    assert isinstance(finish, Finish) and finish.response.text == "hello"
    assert (primary.calls, backup.calls) == (1, 1)
