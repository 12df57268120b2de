"""OpenTelemetry spans of a turn (fxdurable/runtime/tracing.py), read with the SDK's in-memory
exporter: the span tree and its attributes, an unknown outcome on a recovering attempt, one
trace across two workers, and no prompt or tool output in any attribute."""

from __future__ import annotations

import pydantic
from obs_agents import ANSWER, PROMPT, TOOL_OUTPUT, agent
from opentelemetry import trace

import fxdurable as fx
from fxdurable.runtime import tracing
from tests.runtime.fxrt_support import (
    FAST,
    NO_SCAN,
    at_rest,
    db_url,
    fresh_store,
    leave_crashed_turn,
    owned_store,
    run,
)

SECRETS = ("SECRET", PROMPT, TOOL_OUTPUT, ANSWER)


def _no_secrets(spans) -> None:
    for span in spans.all():
        for key, value in (span.attributes or {}).items():
            text = str(value)
            assert not any(s in text for s in SECRETS), f"{span.name} {key}={text!r}"


def test_a_turn_is_one_trace_of_attempt_model_and_tool_spans(tmp_path, spans):
    async def main():
        async with fx.Runtime([agent()], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1").run(PROMPT, timeout=10) == ANSWER
            await at_rest(rt, "s1")

    run(main())
    turn = spans.one("fxdurable.turn")
    attempt = spans.one("fxdurable.attempt")
    tool = spans.one("fxdurable.tool_call")
    models = spans.named("fxdurable.model_call")
    assert len(models) == 2
    assert {s.context.trace_id for s in spans.all()} == {turn.context.trace_id}
    assert turn.parent is None
    assert attempt.parent.span_id == turn.context.span_id
    assert all(s.parent.span_id == attempt.context.span_id for s in [tool, *models])

    sub_id = turn.attributes["fxdurable.submission.id"]
    assert turn.attributes["fxdurable.session.id"] == "s1"
    assert turn.attributes["fxdurable.agent"] == "eng"
    assert dict(attempt.attributes) == {
        "fxdurable.session.id": "s1",
        "fxdurable.submission.id": sub_id,
        "fxdurable.agent": "eng",
        "fxdurable.attempt.number": 1,
        "fxdurable.attempt.outcome": "completed",
    }
    first, second = sorted(models, key=lambda s: s.start_time)
    assert first.attributes["gen_ai.request.model"] == "scripted"
    assert first.attributes["fxdurable.model.round"] == 0
    assert first.attributes["fxdurable.model.retries"] == 0
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert second.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert first.attributes["gen_ai.usage.input_tokens"] > 0
    assert first.attributes["gen_ai.usage.output_tokens"] > 0
    assert first.attributes["fxdurable.model.outcome"] == "recorded"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["fxdurable.tool.policy"] == "idempotent"
    assert tool.attributes["fxdurable.tool.outcome"] == "completed"
    assert tool.attributes["fxdurable.tool.recovery"] is False
    assert tool.attributes["fxdurable.tool.execution_id"]
    _no_secrets(spans)


class Deploy(pydantic.BaseModel):
    version: str


class Path(pydantic.BaseModel):
    path: str


def test_an_interrupted_unsafe_call_is_outcome_unknown_on_the_recovering_attempt(tmp_path, spans):
    @fx.tool(reuse=False)
    def read_file(inp: Path, ctx: fx.ToolContext) -> str:
        "Read a file."
        return "after the edit"

    @fx.tool(replay="unsafe")
    def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
        "Deploy."
        raise AssertionError("an unsafe call is never re-run")

    model = fx.ScriptedModel([fx.reply("I will check first")])
    eng = fx.Agent("eng", model, tools=[read_file, deploy])
    url = db_url(tmp_path)
    # The crash left the round's read completed and its deploy running.
    calls = [fx.call("read_file", path="a"), fx.call("deploy", version="1.4")]
    left = {"completed": {0: "before the edit"}, "running": [1]}
    crashed = leave_crashed_turn(url, agent="eng", calls=calls, policies=["safe", "unsafe"], **left)

    async def main():
        async with fx.Runtime([eng], store=owned_store(url), settings=FAST) as rt:
            await rt.session("s1").wait(crashed.submission.id, timeout=10)
            await at_rest(rt, "s1")

    run(main())
    attempt = spans.one("fxdurable.attempt")
    reread, tool = sorted(spans.named("fxdurable.tool_call"), key=lambda s: s.start_time)
    assert attempt.attributes["fxdurable.attempt.number"] == 2
    assert attempt.attributes["fxdurable.attempt.outcome"] == "completed"
    assert tool.parent.span_id == attempt.context.span_id
    assert tool.attributes["fxdurable.tool.recovery"] is True
    assert tool.attributes["fxdurable.tool.policy"] == "unsafe"
    assert tool.attributes["fxdurable.tool.outcome"] == "outcome_unknown"
    assert tool.attributes["fxdurable.tool.execution_id"] == crashed.tasks[1].execution_id
    # reuse=False: the completed read of the interrupted round runs again, in a span of its own
    assert reread.attributes["gen_ai.tool.name"] == "read_file"
    assert reread.attributes["fxdurable.tool.outcome"] == "completed"
    assert reread.attributes["fxdurable.tool.runs"] == 2
    assert reread.parent.span_id == attempt.context.span_id
    _no_secrets(spans)


def test_a_turn_continued_by_another_runtime_is_one_trace(tmp_path, spans):
    """Two runtimes on one SQLite file: the first stops at its deadline after one step, the
    second, which has no context of its own, continues from the record's traceparent."""
    url = db_url(tmp_path)
    eng = agent()

    async def main():
        first = fx.Runtime([eng], store=owned_store(url), settings=NO_SCAN)
        with trace.get_tracer("app").start_as_current_span("app.request") as app:
            sub = await first.session("s1").submit(PROMPT)
        await first.wake("s1", budget_s=0)  # one step, then a continuation
        await first.aclose()
        second = fx.Runtime([eng], store=owned_store(url), settings=NO_SCAN)
        await second.wake("s1")
        assert (await second.session("s1").submission(sub.id)).result == ANSWER
        await second.aclose()
        return app

    app = run(main())
    turn = spans.one("fxdurable.turn")
    attempts = sorted(spans.named("fxdurable.attempt"), key=lambda s: s.start_time)
    assert [a.attributes["fxdurable.attempt.outcome"] for a in attempts] == [
        "suspended",
        "completed",
    ]
    assert [a.attributes["fxdurable.attempt.number"] for a in attempts] == [1, 2]
    assert turn.parent.span_id == app.get_span_context().span_id
    assert {s.context.trace_id for s in spans.all()} == {app.get_span_context().trace_id}
    assert all(a.parent.span_id == turn.context.span_id for a in attempts)
    _no_secrets(spans)


def test_the_wake_context_wins_only_within_the_turns_trace():
    stored = "00-" + "a" * 32 + "-" + "1" * 16 + "-01"
    same = "00-" + "a" * 32 + "-" + "2" * 16 + "-01"
    other = "00-" + "b" * 32 + "-" + "3" * 16 + "-01"
    assert tracing._attempt_parent(stored, same) == same
    assert tracing._attempt_parent(stored, other) == stored  # a wake for the next prompt
    assert tracing._attempt_parent(None, other) == other
    assert tracing._attempt_parent(stored, None) == stored


def test_post_chat_joins_the_callers_traceparent(tmp_path, spans):
    import httpx

    from fxdurable.http.app import create_app

    caller = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"

    async def alice(request) -> str:
        return "alice"

    async def main():
        rt = fx.Runtime([agent()], store=fresh_store(tmp_path), settings=FAST)
        app = create_app(rt, authenticate=alice)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                response = await client.post(
                    "/chat", headers={"traceparent": caller}, json={"prompt": PROMPT}, timeout=10
                )
                assert response.status_code == 200 and ANSWER in response.text

    run(main())
    turn = spans.one("fxdurable.turn")
    assert f"{turn.context.trace_id:032x}" == "c" * 32
    assert f"{turn.parent.span_id:016x}" == "d" * 16
    assert {s.context.trace_id for s in spans.all()} == {turn.context.trace_id}
    assert spans.one("fxdurable.attempt").attributes["fxdurable.attempt.outcome"] == "completed"
    _no_secrets(spans)


class _Overloaded:
    @property
    def name(self) -> str:
        return "primary"

    async def stream(self, request):
        raise fx.ModelOverloadedError("529 overloaded")
        yield  # pragma: no cover - an async generator


def test_a_fallback_switch_names_the_model_each_call_went_to(tmp_path, spans):
    backup = fx.ScriptedModel([fx.reply("from backup")], name="backup")

    async def main():
        chain = fx.Agent("chain", [_Overloaded(), backup])
        async with fx.Runtime([chain], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1").run("hi", timeout=10) == "from backup"

    run(main())
    models = sorted(spans.named("fxdurable.model_call"), key=lambda s: s.start_time)
    assert [s.attributes["gen_ai.request.model"] for s in models] == ["primary", "backup"]
    assert [s.attributes["fxdurable.model.outcome"] for s in models] == ["retry", "recorded"]
