"""The in-process queue holds at most one waiting wake per session (issue 9 §2)."""

from __future__ import annotations

import asyncio

import pydantic
from fxrt_support import NO_SCAN, check_invariants, fresh_store, last_user_text, rounds_done, run

import fxdurable as fx
from fxdurable.queues.local import LocalQueue


class Hold(pydantic.BaseModel):
    pass


def test_a_session_has_one_waiting_wake_however_often_it_is_woken():
    async def main():
        queue = LocalQueue()
        for reason in ("submitted", "reconcile", "reconcile", "steer"):
            await queue.enqueue("s1", reason=reason)
        await queue.enqueue("s2", reason="submitted")
        assert queue.pending() == 2
        assert await queue.get() == ("s1", "submitted", None)
        # taken: a wake arriving now is kept (the handler may have read the store already)
        await queue.enqueue("s1", reason="more work")
        assert queue.pending() == 2
        assert [await queue.get(), await queue.get()] == [
            ("s2", "submitted", None),
            ("s1", "more work", None),
        ]

    run(main())


def test_scans_while_the_workers_are_busy_do_not_grow_the_queue(tmp_path):
    """19 sessions wait behind the only worker, held by a long turn; every scan finds them
    with work and no owner and wakes them again. Each keeps one waiting wake (before: every
    scan added 19 more), and each still runs once the worker is free."""
    gate: dict[str, asyncio.Event] = {}

    @fx.tool
    async def hold(inp: Hold, ctx: fx.ToolContext) -> str:
        "Hold the worker."
        gate["holding"].set()
        await gate["free"].wait()
        return "held"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if last_user_text(request) == "block" and rounds_done(request) == 0:
            return fx.reply("", fx.call("hold"))
        return fx.reply("done")

    agent = fx.Agent("eng", fx.ScriptedModel(policy), tools=[hold])

    async def main():
        gate["holding"], gate["free"] = asyncio.Event(), asyncio.Event()
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=NO_SCAN, concurrency=1
        ) as rt:
            blocker = await rt.session("busy").submit("block")
            await asyncio.wait_for(gate["holding"].wait(), 5)
            waiting = {f"w{n}": await rt.session(f"w{n}").submit("wait") for n in range(19)}
            for _ in range(5):
                assert await rt.reconcile() == 19
            assert rt.queue.pending() == 19  # type: ignore[attr-defined]
            gate["free"].set()
            for session_id, sub in waiting.items():
                settled = await rt.session(session_id).wait(sub.id, timeout=10)
                assert settled.status.value == "completed"
            assert (await rt.session("busy").wait(blocker.id, timeout=5)).result == "done"
            for session_id in ("busy", *waiting):
                await check_invariants(rt, session_id)

    run(main(), timeout=40)
