"""Abort is durable (DESIGN §3.8): every unsettled submission settles ``aborted``; a tool in
flight is cancelled (safe: ``cancelled``, otherwise ``outcome_unknown``)."""

from __future__ import annotations

import asyncio
import threading
import time

import pydantic
import pytest
from fxrt_support import (
    FAST,
    NO_SCAN,
    check_invariants,
    db_url,
    event_types,
    events,
    fresh_store,
    last_user_text,
    leave_crashed_turn,
    owned_store,
    read,
    run,
    tasks,
)

import fxdurable as fx
from fxdurable.runtime.decide import unknown_message


class Job(pydantic.BaseModel):
    name: str


def _slow_agent(
    replay, started: asyncio.Event, seen: list[str]
) -> tuple[fx.Agent, fx.ScriptedModel]:
    async def slow(inp: Job, ctx: fx.ToolContext) -> str:
        started.set()
        try:
            for _ in range(1000):
                if ctx.cancelled.is_set():
                    seen.append("noticed")
                    return "stopped"
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("finished")
        return "finished"

    tool = fx.define_tool(
        "slow", description="slow work", input_model=Job, execute=slow, replay=replay
    )

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if last_user_text(request).startswith("after"):
            return fx.reply("fresh start")
        return fx.reply("working", fx.call("slow", name=last_user_text(request)))

    model = fx.ScriptedModel(policy)
    return fx.Agent("eng", model, tools=[tool]), model


@pytest.mark.parametrize(
    ("replay", "status"),
    [("safe", "cancelled"), ("unsafe", "outcome_unknown"), ("idempotent", "outcome_unknown")],
)
def test_abort_cancels_the_tool_in_flight(tmp_path, replay, status):
    async def main():
        started = asyncio.Event()
        seen: list[str] = []
        agent, model = _slow_agent(replay, started, seen)
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("job")
            await asyncio.wait_for(started.wait(), 5)
            assert await s.abort() == [sub.id]
            settled = await s.wait(sub.id, timeout=5)
            assert settled.status.value == "aborted"
            assert seen == ["cancelled"]
            (task,) = tasks(rt, sub.id)
            assert task.status.value == status
            if status == "outcome_unknown":
                assert unknown_message("slow") in (task.result or "")
            types = event_types(rt, "s1")
            assert types.count("abort.requested") == 1
            assert f"tool.{status}" in types
            assert types.count("submission.aborted") == 1
            assert len(model.requests) == 1  # the model is not asked again after an abort
            with pytest.raises(fx.SubmissionFailedError) as caught:
                await s.run("job", request_id=sub.request_id, timeout=5)
            assert caught.value.status == "aborted"
            # the session is at rest and takes the next message
            assert await s.run("after abort", timeout=5) == "fresh start"
            await check_invariants(rt, "s1")

    run(main())


def test_abort_signals_a_sync_tool_through_ctx_cancelled(tmp_path):
    """A sync tool runs in a thread that cannot be cancelled: it must see ``ctx.cancelled``."""
    in_tool = threading.Event()
    seen: list[str] = []

    def slow(inp: Job, ctx: fx.ToolContext) -> str:
        in_tool.set()
        for _ in range(500):
            if ctx.cancelled.is_set():
                seen.append("noticed")
                return "stopped"
            time.sleep(0.01)
        seen.append("finished")
        return "finished"

    tool = fx.define_tool("slow", description="slow", input_model=Job, execute=slow)
    agent = fx.Agent(
        "eng", fx.ScriptedModel([fx.reply("", fx.call("slow", name="x"))]), tools=[tool]
    )

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("job")
            while not in_tool.is_set():
                await asyncio.sleep(0.01)
            await s.abort()
            assert (await s.wait(sub.id, timeout=5)).status.value == "aborted"
            # Its thread ran on past the abort: what it did may still happen, so even a safe
            # sync call is unknown, never "cancelled" (docs/aborting.md).
            assert tasks(rt, sub.id)[0].status.value == "outcome_unknown"
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.02)
            assert seen == ["noticed"]
            await check_invariants(rt, "s1")

    run(main())


def test_abort_also_aborts_queued_submissions_without_running_them(tmp_path):
    async def main():
        started = asyncio.Event()
        seen: list[str] = []
        agent, model = _slow_agent("safe", started, seen)
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            running = await s.submit("job one")
            queued = await s.submit("job two")
            await asyncio.wait_for(started.wait(), 5)
            assert sorted(await s.abort()) == sorted([running.id, queued.id])
            assert (await s.wait(running.id, timeout=5)).status.value == "aborted"
            assert (await s.wait(queued.id, timeout=5)).status.value == "aborted"
            assert len(model.requests) == 1  # only the first submission reached the model
            assert tasks(rt, queued.id) == []
            assert not [
                e
                for e in events(rt, "s1")
                if e.type == "model.completed" and e.turn_id == queued.id
            ]
            assert await s.abort() == []  # nothing unsettled any more
            await check_invariants(rt, "s1")

    run(main())


def test_abort_of_a_queued_submission_before_any_worker_ran_it(tmp_path):
    model = fx.ScriptedModel([fx.reply("should not run")])
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=NO_SCAN) as rt:
            # admitted, but its wake was never delivered
            sub = rt.journal.admit("s1", agent="eng", prompt="p").submission
            s = rt.session("s1")
            assert await s.abort() == [sub.id]
            settled = await s.wait(sub.id, timeout=5)
            assert settled.status.value == "aborted"
            assert not model.requests
            assert "model.completed" not in event_types(rt, "s1")
            await check_invariants(rt, "s1")

    run(main())


def test_abort_during_a_model_call_runs_none_of_the_tools_it_asked_for(tmp_path):
    executed: list[str] = []

    @fx.tool
    def lookup(inp: Job, ctx: fx.ToolContext) -> str:
        "Look up."
        executed.append(inp.name)
        return "ok"

    # a slow stream: ~0.6 s of deltas before the finish
    model = fx.ScriptedModel(
        [fx.reply("x" * 60, fx.call("lookup", name="a"), fx.call("lookup", name="b"))],
        chunk_size=2,
        delay_s=0.02,
    )
    agent = fx.Agent("eng", model, tools=[lookup])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            while not model.requests:
                await asyncio.sleep(0.01)
            await s.abort()
            assert (await s.wait(sub.id, timeout=5)).status.value == "aborted"
            assert executed == []
            assert [t.status.value for t in tasks(rt, sub.id)] in ([], ["cancelled"] * 2)
            await check_invariants(rt, "s1")

    run(main())


def test_abort_recorded_while_no_process_runs_the_session(tmp_path):
    """The worker died mid-tool; the abort intent lands; recovery settles ``aborted``."""
    url = db_url(tmp_path)
    executed: list[str] = []

    @fx.tool(replay="unsafe")
    def deploy(inp: Job, ctx: fx.ToolContext) -> str:
        "Deploy."
        executed.append(inp.name)
        return "ok"

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("should not be asked")])
    agent = fx.Agent("eng", model, tools=[deploy])
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=[fx.call("deploy", name="x")],
        policies=["unsafe"],
        running=[0],
        after=lambda journal, fence: journal.request_abort("s1"),
    )

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            assert sub.status.value == "aborted"
            assert executed == []
            assert not model.requests
            assert tasks(rt, crashed.turn_id)[0].status.value == "outcome_unknown"
            await check_invariants(rt, "s1")

    run(main())


def test_abort_of_an_unknown_or_idle_session(tmp_path):
    agent = fx.Agent("eng", fx.ScriptedModel([fx.reply("x")]))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            assert await s.run("p", timeout=5) == "x"
            assert await s.abort() == []
            assert "abort.requested" not in event_types(rt, "s1")
            assert read(rt, lambda v: v.get_session("s1")).status.value == "idle"

    run(main())
