"""Model failures in the turn loop: retries with backoff and a durable error budget, fatal
errors, compaction on a context-length error, partial text kept visible, cost accounting."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pydantic
import pytest
from fxrt_support import FAST, fresh_store, run

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.errors import ContextLengthError, ModelError, ModelRetryableError
from fxdurable.runtime.model_step import SUMMARIZE_INSTRUCTIONS, backoff_delay
from fxdurable.runtime.models.base import Finish, ModelRequest, ModelResponse, TextDelta
from fxdurable.runtime.models.scripted import ScriptedModel


class Empty(pydantic.BaseModel):
    pass


class FailingFirstModel:
    """Raises the queued errors first, then answers like the wrapped scripted model."""

    def __init__(self, inner: ScriptedModel, errors: list[Exception]) -> None:
        self._inner = inner
        self.errors = errors
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "failing-first"

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | Finish]:
        self.requests.append(request)
        if self.errors:
            raise self.errors.pop(0)
        async for part in self._inner.stream(request):
            yield part


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def runtime(tmp_path: Path, agent: fx.Agent, sleeps: Sleeps, **kw: object) -> fx.Runtime:
    return fx.Runtime(
        [agent],
        store=fresh_store(tmp_path),
        settings=FAST,
        sleep=sleeps,
        rng=random.Random(7),
        **kw,  # type: ignore[arg-type]
    )


def test_transient_errors_are_retried_with_backoff_honouring_retry_after(tmp_path: Path) -> None:
    model = FailingFirstModel(
        ScriptedModel([fx.reply("done")]),
        [ModelRetryableError("429", retry_after_s=7.5), ModelRetryableError("503")],
    )
    sleeps = Sleeps()
    agent = fx.Agent("a", model)

    async def go() -> None:
        async with runtime(tmp_path, agent, sleeps) as rt:
            s = rt.session("s")
            assert await s.run("hi", timeout=10) == "done"
            errors = [e for e in await s.events() if e.type == "model.error"]
            assert [e.data["errors"] for e in errors] == [1, 2]
            assert "429" in str(errors[0].data["message"])

    run(go())
    assert len(sleeps.delays) == 2
    assert sleeps.delays[0] >= 7.5, "Retry-After is a floor"
    assert 1.0 <= sleeps.delays[1] <= 2.0, "second failure: within [base*2/2, base*2]"


def test_error_budget_fails_the_submission_and_the_session_rests(tmp_path: Path) -> None:
    retries = fx.Durability(model_retries=fx.ModelRetries(budget=2, base_s=0.01, max_s=0.01))
    model = FailingFirstModel(ScriptedModel([fx.reply("fine")]), [ModelRetryableError("500")] * 3)
    agent = fx.Agent("a", model, durability=retries)

    async def go() -> None:
        async with runtime(tmp_path, agent, Sleeps()) as rt:
            s = rt.session("s")
            with pytest.raises(fx.SubmissionFailedError) as failed:
                await s.run("hi", timeout=10)
            assert failed.value.error["code"] == "model_error"
            assert "budget 2" in failed.value.error["message"]
            assert await s.run("again", timeout=10) == "fine"  # the session came to rest

    run(go())


def test_a_fatal_model_error_fails_at_once(tmp_path: Path) -> None:
    model = FailingFirstModel(ScriptedModel([fx.reply("x")]), [ModelError("401 invalid api key")])
    sleeps = Sleeps()

    async def go() -> None:
        async with runtime(tmp_path, fx.Agent("a", model), sleeps) as rt:
            with pytest.raises(fx.SubmissionFailedError) as failed:
                await rt.session("s").run("hi", timeout=10)
            assert "401" in failed.value.error["message"]

    run(go())
    assert sleeps.delays == [] and len(model.requests) == 1


def test_backoff_that_does_not_fit_the_invocation_continues_later(tmp_path: Path) -> None:
    """An hour's Retry-After in a 5 s invocation: the attempt yields, the continuation waits
    (tests/runtime/test_model_backoff_across_invocations.py sees one through), and the scan's
    early wakes neither sleep nor call the model nor begin attempts."""
    model = FailingFirstModel(
        ScriptedModel([fx.reply("later")]), [ModelRetryableError("429", retry_after_s=3600)]
    )
    sleeps = Sleeps()

    async def go() -> None:
        async with runtime(tmp_path, fx.Agent("a", model), sleeps, invocation_budget_s=5.0) as rt:
            s = rt.session("s")
            sub = await s.submit("hi")
            while not [e for e in await s.events() if e.type == "attempt.yielded"]:
                await asyncio.sleep(0.02)
            await asyncio.sleep(1.0)  # the scan wakes the session 5 times a second here
            yielded = [e for e in await s.events() if e.type == "attempt.yielded"]
            assert [e.data["reason"] for e in yielded] == ["model backoff"]
            assert len(rt.journal.read(lambda v: v.attempts(sub.id))) == 1

    run(go())
    assert sleeps.delays == [], "an hour's wait is not slept inside a 5 s invocation"
    assert len(model.requests) == 1, "nor is the model called again before it ends"


def test_backoff_delay_grows_and_is_capped() -> None:
    policy = fx.ModelRetries(budget=10, base_s=1.0, max_s=8.0)
    rng = random.Random(1)
    delays = [backoff_delay(n, None, policy, rng) for n in range(1, 7)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(8.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert backoff_delay(1, 30.0, policy, rng) == 30.0


def _long_context_model(limit: int) -> tuple[FailingFirstModel, Callable[[], int]]:
    summaries = 0

    def policy(request: ModelRequest) -> ModelResponse:
        nonlocal summaries
        if request.instructions.startswith(SUMMARIZE_INSTRUCTIONS):
            summaries += 1
            return fx.reply("SUMMARY: the user asked three long questions")
        size = len(request.instructions) + sum(len(m.text) for m in request.messages)
        if size > limit:
            raise ContextLengthError(f"prompt is too long: {size} > {limit}")
        return fx.reply(f"answer {len(request.messages)}")

    return FailingFirstModel(ScriptedModel(policy), []), lambda: summaries


def test_context_length_error_compacts_older_turns_and_retries(tmp_path: Path) -> None:
    model, summaries = _long_context_model(limit=2_500)
    agent = fx.Agent("a", model, instructions="Be brief.")

    async def go() -> None:
        async with runtime(tmp_path, agent, Sleeps()) as rt:
            s = rt.session("s")
            for n in range(3):
                await s.run(f"question {n}: " + "x" * 1_000, timeout=10)
            events = await s.events()
            compacted = [e for e in events if e.type == "context.compacted"]
            assert len(compacted) == 1
            full = await s.history()
            assert sum(1 for m in full if m.role == "user") == 3, "history keeps every message"

    run(go())
    assert summaries() == 1
    after = model.requests[-1]
    assert "SUMMARY: the user asked" in after.instructions
    assert [m.role for m in after.messages] == ["user"], "only the current turn is sent"


def test_a_turn_too_long_by_itself_fails_with_context_length(tmp_path: Path) -> None:
    model, _ = _long_context_model(limit=100)

    async def go() -> None:
        async with runtime(tmp_path, fx.Agent("a", model), Sleeps()) as rt:
            s = rt.session("s")
            with pytest.raises(fx.SubmissionFailedError) as failed:
                await s.run("y" * 500, timeout=10)
            assert failed.value.error["code"] == "context_length"
            assert not [e for e in await s.events() if e.type == "context.compacted"]

    run(go())


def test_streamed_text_is_kept_as_partials_before_the_call_is_recorded(tmp_path: Path) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice over."
    model = ScriptedModel([fx.reply(text)], chunk_size=8, delay_s=0.01)
    agent = fx.Agent("a", model, durability=fx.Durability(partial_text_every_s=0.0))

    async def go() -> None:
        async with runtime(tmp_path, agent, Sleeps()) as rt:
            s = rt.session("s")
            assert await s.run("go", timeout=10) == text
            events = await s.events()
            partials = [e for e in events if e.type == "model.partial"]
            completed = next(e for e in events if e.type == "model.completed")
            assert partials and all(e.seq < completed.seq for e in partials)
            assert "".join(str(e.data["text"]) for e in partials) == text

    run(go())


def test_fast_calls_write_no_partials_by_default(tmp_path: Path) -> None:
    async def go() -> None:
        async with runtime(
            tmp_path, fx.Agent("a", ScriptedModel([fx.reply("x" * 200)])), Sleeps()
        ) as rt:
            s = rt.session("s")
            await s.run("go", timeout=10)
            assert not [e for e in await s.events() if e.type == "model.partial"]

    run(go())


def test_usage_and_cost_are_recorded_and_summed_in_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pricing = fx.Pricing(input_per_mtok=3.0, output_per_mtok=15.0)
    agent = fx.Agent("a", ScriptedModel([fx.reply("one two three")]), pricing=pricing)
    store = fresh_store(tmp_path)

    async def go() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            s = rt.session("s")
            await s.run("alpha beta", timeout=10)
            done = next(e for e in await s.events() if e.type == "model.completed")
            assert done.data["input_tokens"] == 2 and done.data["output_tokens"] == 3
            assert done.data["cost_usd"] == pytest.approx((2 * 3.0 + 3 * 15.0) / 1e6)
            assert print_trace(store, "s") == 0

    run(go())
    out = capsys.readouterr().out
    assert "session total: 1 model call(s), 2 input + 3 output tokens, $0.0001" in out
