"""Tool progress: ``ctx.progress(chunk)`` is the running task's state, never history.

A sync and an async tool report in a loop while a viewer reads the session: the viewer sees
the progress mid-call (``session.running_task()``, ``session.task(id)``), the writes are
bounded by the call's duration / 100 ms (counted from the task record's version, which each
durable write moves by one), no event records it, and once the call settles its result has
replaced it. The pump that throttles the writes is tested on its own below: coalescing, a
failing write that never fails the call, a refusal that stops it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pydantic
import pytest
from fxrt_support import FAST, check_invariants, events, fresh_store, read, run, tasks

import fxdurable as fx
from fxdurable.core.journal import MAX_PROGRESS_CHARS
from fxdurable.errors import LeaseLostError, StoreUnavailableError
from fxdurable.runtime.progress import PROGRESS_EVERY_S, ProgressPump

REPORTS = 400  # per call: far more than the call's duration allows writes for


class Steps(pydantic.BaseModel):
    name: str


def reporting_tools(seen: threading.Event, spans: list[float]) -> list[fx.Tool]:
    """``sync_job`` and ``async_job``: report REPORTS chunks, half of them before waiting for
    the viewer to have ``seen`` progress mid-call, and record how long the call ran."""

    @fx.tool(replay="unsafe")
    def sync_job(inp: Steps, ctx: fx.ToolContext) -> str:
        "A long job that reports progress from a thread."
        started = time.monotonic()
        for i in range(REPORTS):
            ctx.progress(f"{inp.name} {i}\n")
            if i == REPORTS // 2:
                assert seen.wait(30), "the viewer never saw progress mid-call"
            time.sleep(0.001)
        spans.append(time.monotonic() - started)
        return f"{inp.name} done"

    @fx.tool(replay="unsafe")
    async def async_job(inp: Steps, ctx: fx.ToolContext) -> str:
        "A long job that reports progress on the loop."
        started = time.monotonic()
        for i in range(REPORTS):
            ctx.progress(f"{inp.name} {i}\n")
            if i == REPORTS // 2:
                while not seen.is_set():
                    await asyncio.sleep(0.005)
            await asyncio.sleep(0.001)
        spans.append(time.monotonic() - started)
        return f"{inp.name} done"

    return [sync_job, async_job]


@pytest.mark.parametrize("tool", ["sync_job", "async_job"])
def test_progress_is_readable_mid_call_bounded_and_replaced_by_the_result(tmp_path, tool):
    seen = threading.Event()
    spans: list[float] = []
    model = fx.ScriptedModel([fx.reply("", fx.call(tool, name="build")), fx.reply("built")])
    agent = fx.Agent("eng", model, tools=reporting_tools(seen, spans))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("build it")
            while True:  # the viewer polls, as a UI would
                running = await s.running_task()
                if running is not None and running.progress:
                    break
                await asyncio.sleep(0.005)
            assert running.tool == tool and running.status == "running"
            assert running.progress.startswith("build 0\n")
            assert running.progress_at is not None
            by_id = await s.task(running.id)
            assert by_id is not None and by_id.progress and by_id.progress.startswith("build 0")
            seen.set()

            assert (await s.wait(sub.id, timeout=30)).result == "built"
            [task] = tasks(rt, sub.id)
            done = await s.task(task.id)
            assert done is not None
            assert (done.status, done.result, done.progress, done.progress_at) == (
                "completed",
                "build done",
                None,
                None,
            )
            assert await s.running_task() is None
            # Versions: 1 created, +1 started, +1 per progress write, +1 finished.
            writes = task.version - 3
            assert 1 <= writes <= spans[0] / PROGRESS_EVERY_S + 1, (writes, spans)
            assert writes < REPORTS / 4  # coalesced, not one write per report
            assert not [e for e in events(rt, "s1") if "progress" in e.type]
            assert await rt.session("s1", agent="eng").task("no-such-task") is None
            await check_invariants(rt, "s1")

    run(main(), timeout=60)


def test_a_task_of_another_session_is_not_shown(tmp_path):
    model = fx.ScriptedModel([fx.reply("", fx.call("echo", name="x")), fx.reply("ok")])

    @fx.tool
    def echo(inp: Steps, ctx: fx.ToolContext) -> str:
        "Echo."
        ctx.progress("working")
        return inp.name

    agent = fx.Agent("eng", model, tools=[echo])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            sub = await rt.session("s1").submit("go")
            await rt.session("s1").wait(sub.id, timeout=10)
            [task] = read(rt, lambda v: v.tool_tasks(sub.id))
            assert (await rt.session("s1").task(task.id)) is not None
            assert (await rt.session("s2").task(task.id)) is None

    run(main())


# -- the pump on its own -------------------------------------------------------------------------


def chunk(i: int) -> str:
    return f"{i:04d}" + "x" * 60 + "\n"


LAST = chunk(1999)


def test_reports_from_a_thread_coalesce_into_throttled_writes_of_the_tail():
    written: list[str] = []

    async def main() -> float:
        pump = ProgressPump(written.append, tool="t")
        pump.start()
        started = time.monotonic()

        def report_many() -> None:
            for i in range(2000):
                pump.report(chunk(i))
                if i % 100 == 0:
                    time.sleep(0.01)

        await asyncio.to_thread(report_many)
        while not (written and written[-1].endswith(LAST)):  # the pending tail is written
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - started
        await pump.aclose()
        pump.report("after close")  # ignored, never raises
        return elapsed

    elapsed = run(main())
    assert 1 <= len(written) <= elapsed / PROGRESS_EVERY_S + 1
    assert all(len(text) <= MAX_PROGRESS_CHARS for text in written)
    assert len(written) < 2000 / 10  # coalesced
    assert written[-1] == "".join(chunk(i) for i in range(2000))[-MAX_PROGRESS_CHARS:]


def test_a_failing_write_is_logged_and_never_fails_the_caller(caplog):
    attempts: list[str] = []
    gate = threading.Event()

    def fails_once(text: str) -> None:
        attempts.append(text)
        if len(attempts) == 1:
            raise StoreUnavailableError("store busy")
        gate.set()

    async def main() -> None:
        pump = ProgressPump(fails_once, tool="t", every_s=0.01)
        pump.start()
        pump.report("a")
        while len(attempts) < 1:
            await asyncio.sleep(0.005)
        pump.report("b")
        while not gate.is_set():
            await asyncio.sleep(0.005)
        await pump.aclose()
        assert pump.writes == 1

    with caplog.at_level(logging.WARNING, logger="fxdurable.progress"):
        run(main())
    assert attempts == ["a", "ab"]
    assert "could not record progress of t" in caplog.text


def test_a_lost_lease_stops_the_writes():
    attempts: list[str] = []

    def fenced_out(text: str) -> None:
        attempts.append(text)
        raise LeaseLostError("taken over")

    async def main() -> None:
        pump = ProgressPump(fenced_out, tool="t", every_s=0.01)
        pump.start()
        pump.report("a")
        while not attempts:
            await asyncio.sleep(0.005)
        assert pump._task is not None
        await asyncio.wait_for(asyncio.shield(pump._task), 10)  # it ends on its own
        pump.report("b")
        await pump.aclose()

    run(main())
    assert attempts == ["a"]


def test_close_waits_for_the_write_in_flight():
    in_write = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    def slow(text: str) -> None:
        in_write.set()
        assert release.wait(10)
        finished.append(text)

    async def main() -> None:
        pump = ProgressPump(slow, tool="t")
        pump.start()
        pump.report("a")
        await asyncio.to_thread(in_write.wait, 10)
        closing = asyncio.ensure_future(pump.aclose())
        await asyncio.sleep(0)
        assert not closing.done()
        release.set()
        await closing
        assert finished == ["a"]

    run(main())
