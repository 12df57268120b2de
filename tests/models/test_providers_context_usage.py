"""End to end over HTTP (see ``test_providers_end_to_end.py``): compaction when the wire-format
server answers the provider's context-length 400, and token and cost accounting from the usage
the server reported, through the journal to ``fxdurable trace``."""

from __future__ import annotations

import io
from pathlib import Path

import pydantic
import pytest
from provider_e2e_support import PROVIDERS, fresh_store, of_type, point_at, run, runtime

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.core.records import Usage
from fxdurable.runtime.history import SUMMARY_HEADING
from fxdurable.runtime.model_step import SUMMARIZE_INSTRUCTIONS
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.testing.model_server import Failure, Quirks, ScriptedModelServer


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- compaction ------------------------------------------------------------------------------

LIMIT = 2_600  # characters the server accepts; two long turns fit, three do not
SUMMARY = "SUMMARY: the user asked question 0 and question 1, each padded with x."
ASK = "Summarize the conversation above."


def _summarising_policy(request: ModelRequest) -> ModelResponse:
    if request.instructions.startswith(SUMMARIZE_INSTRUCTIONS):
        return fx.reply(SUMMARY)
    return fx.reply(f"answer {len(request.messages)}")


def _question(n: int) -> str:
    return f"question {n}: " + "x" * 1_000


def test_a_context_length_400_compacts_older_turns_into_a_summary_and_retries(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quirks = Quirks(context_limit_chars=LIMIT)
    with ScriptedModelServer(_summarising_policy, quirks=quirks) as server:
        agent = fx.Agent("a", point_at(monkeypatch, provider, server), instructions="Be brief.")

        async def go() -> tuple[list[str], list[fx.EventRecord], list[str]]:
            async with runtime(tmp_path, [agent]) as rt:
                s = rt.session("s")
                answers = [await s.run(_question(n), timeout=5) for n in range(3)]
                roles = [m.role for m in await s.history()]
                return answers, await s.events(), roles

        answers, events, roles = run(go())

    # The third turn overflowed: 400, the summary request, then the retried turn.
    assert [r.status for r in server.requests] == [200, 200, 400, 200, 200]
    assert answers == ["answer 1", "answer 3", "answer 1"], "the retry sent only this turn"
    compacted = of_type(events, "context.compacted")
    assert len(compacted) == 1
    assert compacted[0].data["summary"] == SUMMARY
    assert compacted[0].data["model"] == f"{provider}/scripted-e2e"
    assert of_type(events, "model.error") == [], "a context-length error is not a failure"
    assert roles.count("user") == 3, "the full history keeps every message"

    # The compaction request carries the summarisation instructions and the older turns.
    summarise = server.requests[3].request
    assert summarise is not None
    assert summarise.instructions.startswith(SUMMARIZE_INSTRUCTIONS)
    assert summarise.messages[-1].role == "user" and summarise.messages[-1].text == ASK
    said = [m.text for m in summarise.messages]
    assert _question(0) in said and _question(1) in said and _question(2) not in said
    assert summarise.tools == [], "a summary needs no tools"

    # The retried request: the summary in the system prompt, only the current turn's messages.
    retried = server.requests[4].request
    assert retried is not None
    assert retried.instructions.startswith("Be brief.")
    assert SUMMARY_HEADING in retried.instructions and SUMMARY in retried.instructions
    assert [(m.role, m.text) for m in retried.messages] == [("user", _question(2))]
    body = server.requests[4].body
    system = body["messages"][0]["content"] if provider == "openai" else body["system"]
    if isinstance(system, list):  # Anthropic's system blocks, the first with a breakpoint
        system = "".join(block["text"] for block in system)
    assert SUMMARY in system, "the summary travels in the provider's system prompt"


def test_a_turn_too_long_by_itself_fails_with_context_length(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quirks = Quirks(context_limit_chars=LIMIT)
    with ScriptedModelServer(_summarising_policy, quirks=quirks) as server:
        agent = fx.Agent("a", point_at(monkeypatch, provider, server), instructions="Be brief.")

        async def go() -> tuple[
            fx.SubmissionFailedError, fx.SubmissionFailedError, list[fx.EventRecord]
        ]:
            async with runtime(tmp_path, [agent]) as rt:
                # Alone in a fresh session: nothing older to compact.
                with pytest.raises(fx.SubmissionFailedError) as alone:
                    await rt.session("fresh").run("y" * 5_000, timeout=5)
                # After two turns: they are compacted, and the turn still does not fit.
                s = rt.session("s")
                for n in range(2):
                    await s.run(_question(n), timeout=5)
                with pytest.raises(fx.SubmissionFailedError) as after:
                    await s.run("z" * 5_000, timeout=5)
                return alone.value, after.value, await s.events()

        alone, after, events = run(go())

    for failed in (alone, after):
        assert failed.error is not None and failed.error["code"] == "context_length"
        assert (
            "the current turn alone is too large for the model and nothing earlier is left to "
            "compact" in failed.error["message"]
        )
    assert [r.status for r in server.requests] == [400, 200, 200, 400, 200, 400]
    assert len(of_type(events, "context.compacted")) == 1, "compacted once, then gave up"


# -- token and cost accounting ---------------------------------------------------------------


class Query(pydantic.BaseModel):
    q: str


def _lookup(inp: Query, ctx: fx.ToolContext) -> str:
    return f"the answer to {inp.q} is 42"


SCRIPT = [
    fx.reply("Let me look that up for you.", fx.call("lookup", q="life")),
    fx.reply("The answer is 42, as the lookup said."),
]


@pytest.mark.parametrize("usage_last", [True, False], ids=["usage-last", "usage-on-finish"])
@pytest.mark.parametrize("priced", [True, False], ids=["priced", "unpriced"])
def test_usage_the_server_reported_is_recorded_and_summed_in_the_trace(
    provider: str, usage_last: bool, priced: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pricing = fx.Pricing(input_per_mtok=3.0, output_per_mtok=15.0) if priced else None
    store = fresh_store(tmp_path)
    tool = fx.define_tool("lookup", description="Look it up.", input_model=Query, execute=_lookup)
    quirks = Quirks(usage_last=usage_last, hold_open_after_finish_s=2.0)
    out = io.StringIO()
    with ScriptedModelServer(SCRIPT, quirks=quirks) as server:
        model = point_at(monkeypatch, provider, server)
        agent = fx.Agent("a", model, tools=[tool], pricing=pricing)

        async def go() -> tuple[list[fx.EventRecord], list[str]]:
            async with runtime(tmp_path, [agent], store=store) as rt:
                s = rt.session("s")
                for prompt in ("What is the answer to life?", "And again, please, once more?"):
                    assert await s.run(prompt, timeout=5) == SCRIPT[1].text
                subs = rt.journal.read(lambda v: [sub.id for sub in v.submissions("s")])
                assert print_trace(store, "s", out=out) == 0
                return await s.events(), subs

        events, subs = run(go())

    reported = [r.response.usage for r in server.requests if r.response is not None]
    assert len(reported) == 4 and all(u.input_tokens > 0 for u in reported)
    completed = of_type(events, "model.completed")
    recorded = [(e.data["input_tokens"], e.data["output_tokens"]) for e in completed]
    assert recorded == [(u.input_tokens, u.output_tokens) for u in reported]

    def cost(u: Usage) -> float:
        return (u.input_tokens * 3.0 + u.output_tokens * 15.0) / 1_000_000

    if priced:
        for event, usage in zip(completed, reported, strict=True):
            assert event.data["cost_usd"] == pytest.approx(cost(usage))
    else:
        assert all(e.data["cost_usd"] is None for e in completed)

    def totals(usages: list[Usage]) -> str:
        text = (
            f"{len(usages)} model call(s), {sum(u.input_tokens for u in usages)} input + "
            f"{sum(u.output_tokens for u in usages)} output tokens"
        )
        if priced:
            text += f", ${sum(cost(u) for u in usages):.4f}"
        return text

    trace = out.getvalue()
    for sub, turn in zip(subs, (reported[:2], reported[2:]), strict=True):
        line = next(x for x in trace.splitlines() if x.startswith(f"submission {sub}:"))
        assert line.endswith(f"; {totals(turn)}"), line
    assert f"session total: {totals(reported)}\n" in trace
    assert ("$" in trace) == priced


# GAP: the compaction's summary call is a billed model call, but ModelStep._compact
# (runtime/model_step.py) drops ``summary.usage`` (record_compaction takes no usage), so the
# journal, the per-turn and session totals and ``fxdurable trace`` under-count tokens and cost.
def test_the_compaction_call_counts_in_the_session_totals(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = fresh_store(tmp_path)
    pricing = fx.Pricing(input_per_mtok=3.0, output_per_mtok=15.0)
    out = io.StringIO()
    with ScriptedModelServer(
        _summarising_policy, quirks=Quirks(context_limit_chars=LIMIT)
    ) as server:
        model = point_at(monkeypatch, provider, server)
        agent = fx.Agent("a", model, instructions="Be brief.", pricing=pricing)

        async def go() -> None:
            async with runtime(tmp_path, [agent], store=store) as rt:
                s = rt.session("s")
                for n in range(3):
                    await s.run(_question(n), timeout=5)
                assert print_trace(store, "s", out=out) == 0

        run(go())

    billed = [r.response.usage for r in server.requests if r.response is not None]
    assert len(billed) == 4, "three turns and one summary were answered"
    inputs, outputs = sum(u.input_tokens for u in billed), sum(u.output_tokens for u in billed)
    total = next(x for x in out.getvalue().splitlines() if x.startswith("session total:"))
    assert f"{inputs} input + {outputs} output tokens" in total, total


# -- partial text ----------------------------------------------------------------------------


def test_text_streamed_before_a_mid_stream_error_stays_visible_as_partials(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = " ".join(f"word{i}" for i in range(40))
    quirks = Quirks(fail_first=[Failure("stream_error")], text_chunk_chars=8)
    every_delta = fx.Durability(partial_text_every_s=0.0)
    with ScriptedModelServer([fx.reply(answer)], quirks=quirks) as server:
        agent = fx.Agent("a", point_at(monkeypatch, provider, server), durability=every_delta)

        async def go() -> list[fx.EventRecord]:
            async with runtime(tmp_path, [agent]) as rt:
                s = rt.session("s")
                assert await s.run("talk", timeout=5) == answer
                return await s.events()

        events = run(go())

    types = [e.type for e in events]
    error_at = types.index("model.error")
    done_at = types.index("model.completed")
    before = "".join(str(e.data["text"]) for e in events[:error_at] if e.type == "model.partial")
    after = "".join(
        str(e.data["text"]) for e in events[error_at:done_at] if e.type == "model.partial"
    )
    assert before and answer.startswith(before) and before != answer, "the cut-off text is kept"
    assert after == answer, "the retried call streams the whole answer again"
    assert [e.data["text"] for e in of_type(events, "model.completed")] == [answer]
    assert len(server.requests) == 2
