"""Parallel tool batches: the safe and idempotent calls of one response run concurrently.

Concurrency is counted, not timed: each tool enters a shared :class:`Meter`, which records how
many calls were in flight at once (``peak``) and holds a call until ``together`` calls are in
(or, if they never come, briefly: a sequential run then shows a peak of 1 and still ends).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pydantic
import pytest
from fxrt_support import (
    FAST,
    Meter,
    check_invariants,
    db_url,
    events,
    fresh_store,
    leave_crashed_turn,
    owned_store,
    run,
    tasks,
    tool_messages,
)

import fxdurable as fx
from fxdurable.core.records import ToolTaskRecord
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import ConfigurationError, LeaseLostError, Suspend
from fxdurable.runtime.batch import HookGate, parallel_batch, run_batch
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import check_store


class Named(pydantic.BaseModel):
    name: str


def metered_tools(meter: Meter) -> list[fx.Tool]:
    @fx.tool
    async def probe(inp: Named, ctx: fx.ToolContext) -> str:
        "A read."
        return await meter.visit(inp.name)

    @fx.tool(replay="idempotent")
    async def fetch(inp: Named, ctx: fx.ToolContext) -> str:
        "An idempotent write."
        return await meter.visit(inp.name)

    @fx.tool(replay="unsafe")
    async def deploy(inp: Named, ctx: fx.ToolContext) -> str:
        "An unsafe write."
        return await meter.visit(inp.name)

    @fx.tool
    async def broken(inp: Named, ctx: fx.ToolContext) -> str:
        "A read that fails once it has company."
        await meter.visit(inp.name)
        raise RuntimeError(f"{inp.name} failed")

    return [probe, fetch, deploy, broken]


def drive(tmp_path, agent: fx.Agent):
    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.wait((await s.submit("go")).id, timeout=10)
            await check_invariants(rt, "s1")
            return sub, tasks(rt, sub.id), events(rt, "s1")

    return run(main())


def started_order(evs) -> list[int]:
    return [e.data["index"] for e in evs if e.type == "tool.started"]


def test_safe_and_idempotent_calls_run_together_and_the_model_reads_them_in_asked_order(tmp_path):
    # The last call finishes first: completion order is the reverse of the asked order.
    meter = Meter(4, finish_after={"a": 0.06, "b": 0.04, "c": 0.02})
    calls = [fx.call("probe", name="a"), fx.call("fetch", name="b")]
    calls += [fx.call("probe", name="c"), fx.call("fetch", name="d")]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    sub, recorded, evs = drive(tmp_path, fx.Agent("eng", model, tools=metered_tools(meter)))

    assert sub.status.value == "completed" and sub.result == "done"
    assert meter.peak == 4
    assert meter.left == ["d", "c", "b", "a"]
    # The batch's intents are one commit, in asked order; results are recorded as they
    # finished (those arriving together share a commit); the model reads them by index.
    assert started_order(evs) == [0, 1, 2, 3]
    settled = [e.data["index"] for e in evs if e.type == "tool.completed"]
    assert settled == [3, 2, 1, 0]
    assert [t.status for t in recorded] == [ToolTaskStatus.COMPLETED] * 4
    assert [m.text for m in tool_messages(model.requests[-1])] == [
        "a ok",
        "b ok",
        "c ok",
        "d ok",
    ]


def test_an_unsafe_call_runs_alone_at_its_position(tmp_path):
    meter = Meter(2)
    calls = [fx.call("probe", name="a"), fx.call("probe", name="b")]
    calls += [fx.call("deploy", name="u")]
    calls += [fx.call("fetch", name="c"), fx.call("probe", name="d")]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    sub, _, evs = drive(tmp_path, fx.Agent("eng", model, tools=metered_tools(meter)))

    assert sub.status.value == "completed"
    assert meter.peak == 2
    assert meter.entered[2] == "u" and set(meter.entered[:2]) == {"a", "b"}
    # The unsafe call starts after both calls before it settled, and the calls after it
    # start after it settled: its position in the event log is exact.
    kinds = [(e.type, e.data["index"]) for e in evs if e.type.startswith("tool.")]
    u_started = kinds.index(("tool.started", 2))
    u_settled = kinds.index(("tool.completed", 2))
    assert {("tool.completed", 0), ("tool.completed", 1)} <= set(kinds[:u_started])
    assert kinds[u_started + 1] == ("tool.completed", 2)
    assert {("tool.started", 3), ("tool.started", 4)} <= set(kinds[u_settled + 1 :])
    assert [m.text for m in tool_messages(model.requests[-1])] == [
        "a ok",
        "b ok",
        "u ok",
        "c ok",
        "d ok",
    ]


def test_parallel_tools_false_runs_every_call_after_the_one_before(tmp_path):
    # Nobody waits for company, but each call lingers: overlapping calls would be counted.
    meter = Meter(1, finish_after={n: 0.02 for n in "abc"})
    calls = [fx.call("probe", name=n) for n in "abc"]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=metered_tools(meter), parallel_tools=False)
    sub, _, _ = drive(tmp_path, agent)

    assert sub.status.value == "completed"
    assert meter.peak == 1
    assert meter.entered == meter.left == ["a", "b", "c"]


def test_max_parallel_tools_caps_the_calls_in_flight(tmp_path):
    meter = Meter(2)
    calls = [fx.call("probe", name=n) for n in "abcde"]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=metered_tools(meter), max_parallel_tools=2)
    sub, recorded, _ = drive(tmp_path, agent)

    assert sub.status.value == "completed"
    assert meter.peak == 2
    assert [t.result for t in recorded] == [f"{n} ok" for n in "abcde"]


def test_a_failing_call_does_not_cancel_its_siblings(tmp_path):
    meter = Meter(3)
    calls = [fx.call("probe", name="a"), fx.call("broken", name="x"), fx.call("probe", name="c")]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    sub, recorded, _ = drive(tmp_path, fx.Agent("eng", model, tools=metered_tools(meter)))

    assert sub.status.value == "completed"
    assert meter.peak == 3
    assert [t.status for t in recorded] == [
        ToolTaskStatus.COMPLETED,
        ToolTaskStatus.FAILED,
        ToolTaskStatus.COMPLETED,
    ]
    seen = [m.text for m in tool_messages(model.requests[-1])]
    assert seen == ["a ok", "RuntimeError: x failed", "c ok"]


def test_the_hooks_of_a_batch_run_in_asked_order_and_a_denial_fails_only_its_call(tmp_path):
    meter = Meter(2)
    asked: list[str] = []

    async def before_tool(name: str, arguments: str) -> str | None:
        asked.append(arguments)
        return "not that one" if '"b"' in arguments else None

    calls = [fx.call("probe", name=n) for n in "abc"]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=metered_tools(meter), before_tool=before_tool)
    sub, recorded, _ = drive(tmp_path, agent)

    assert sub.status.value == "completed"
    assert asked == [c.arguments for c in calls]  # one at a time, in order
    assert meter.peak == 2 and sorted(meter.entered) == ["a", "c"]
    assert [t.result for t in recorded] == ["a ok", "denied: not that one", "c ok"]


def test_an_abort_cancels_every_call_of_the_batch(tmp_path):
    inside: list[str] = []

    @fx.tool
    async def wait(inp: Named, ctx: fx.ToolContext) -> str:
        "Waits until cancelled."
        inside.append(inp.name)
        await asyncio.sleep(60)
        return "never"

    calls = [fx.call("wait", name=n) for n in "ab"]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("unreached")])
    agent = fx.Agent("eng", model, tools=[wait])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            while len(inside) < 2:
                await asyncio.sleep(0.01)
            await s.abort()
            settled = await s.wait(sub.id, timeout=10)
            await check_invariants(rt, "s1")
            return settled, tasks(rt, sub.id)

    settled, recorded = run(main())
    assert settled.status.value == "aborted"
    assert [t.status for t in recorded] == [ToolTaskStatus.CANCELLED] * 2


def test_recovery_keeps_recorded_results_and_reruns_the_rest_together(tmp_path):
    """A crash with a batch half done: call 1 recorded its result, calls 0 and 2 were running,
    call 3 never had its intent recorded. Recovery serves 1 from the record, re-runs 0 (safe)
    and 2 (idempotent, same execution id) and runs 3, together; the model reads them by
    index."""
    url = db_url(tmp_path)
    meter = Meter(3)
    keys: list[str] = []
    tools = metered_tools(meter)

    @fx.tool(replay="idempotent")
    async def charge(inp: Named, ctx: fx.ToolContext) -> str:
        "An idempotent write keyed by its execution id."
        keys.append(ctx.execution_id)
        return await meter.visit(inp.name)

    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("recovered")])
    agent = fx.Agent("eng", model, tools=[*tools, charge])
    calls = [fx.call("probe", name="a"), fx.call("probe", name="b")]
    calls += [fx.call("charge", name="c"), fx.call("fetch", name="d")]
    crashed = leave_crashed_turn(
        url,
        agent="eng",
        calls=calls,
        policies=["safe", "safe", "idempotent", "idempotent"],
        completed={1: "b from before the crash"},
        running=[0, 2],
    )

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            await check_invariants(rt, "s1")
            return sub, tasks(rt, crashed.turn_id), events(rt, "s1")

    sub, recorded, evs = run(main())
    assert sub.status.value == "completed" and sub.result == "recovered"
    assert sorted(meter.entered) == ["a", "c", "d"] and meter.peak == 3
    assert keys == [crashed.tasks[2].execution_id]
    assert [t.runs for t in recorded] == [2, 1, 2, 1]
    reasons = {(e.data["index"], e.data["reason"]) for e in evs if e.type == "tool.started"}
    assert {(0, "recovery"), (2, "recovery"), (3, None)} <= reasons
    assert [m.text for m in tool_messages(model.requests[-1])] == [
        "a ok",
        "b from before the crash",
        "c ok",
        "d ok",
    ]


def _task(index: int, policy: str, status: ToolTaskStatus) -> ToolTaskRecord:
    return ToolTaskRecord(
        id=f"t{index}",
        session_id="s1",
        turn_id="u1",
        round=0,
        index=index,
        tool="x",
        arguments="{}",
        provider_id=None,
        policy=policy,
        status=status,
        execution_id=f"e{index}",
        updated_at=0.0,
    )


P, R, C = ToolTaskStatus.PENDING, ToolTaskStatus.RUNNING, ToolTaskStatus.COMPLETED


@pytest.mark.parametrize(
    ("round_", "limit", "expected"),
    [
        ([("safe", P), ("idempotent", P), ("unsafe", P), ("safe", P)], 8, [0, 1]),
        ([("unsafe", P), ("safe", P)], 8, [0]),
        ([("safe", C), ("safe", R), ("safe", C), ("idempotent", P)], 8, [1, 3]),
        ([("safe", P), ("safe", P), ("safe", P)], 2, [0, 1]),
        ([("safe", C), ("unsafe", C)], 8, []),
        ([("safe", P), ("safe", P)], 1, [0]),
    ],
)
def test_a_batch_is_the_next_unsettled_calls_up_to_an_unsafe_one(round_, limit, expected):
    round_tasks = [_task(i, policy, status) for i, (policy, status) in enumerate(round_)]
    batch = parallel_batch(list(reversed(round_tasks)), limit=limit)
    assert [t.index for t in batch] == expected


def test_max_parallel_tools_must_be_positive():
    with pytest.raises(ConfigurationError, match="max_parallel_tools"):
        fx.Agent("eng", fx.ScriptedModel([]), max_parallel_tools=0)


def test_the_checker_reports_a_call_that_overlapped_an_unsafe_one(tmp_path):
    """``fxdurable check``'s ``unsafe-overlap``: a journal driven to start a read while an
    unsafe call of the same turn runs (what a driver ignoring the policy would record)."""
    url = db_url(tmp_path)
    calls = [fx.call("deploy", name="u"), fx.call("probe", name="a")]
    leave_crashed_turn(url, agent="eng", calls=calls, policies=["unsafe", "safe"], running=[0, 1])
    store = SqliteStore(url)
    try:
        summary = store.read(lambda v: check_store(v, now=0.0))
    finally:
        store.close()
    overlaps = [v for v in summary.violations if v.code == "unsafe-overlap"]
    assert len(overlaps) == 1 and "started" in overlaps[0].detail, summary.violations


def test_a_batch_and_an_unsafe_call_leave_nothing_for_the_checker(tmp_path):
    meter = Meter(2)
    calls = [fx.call("probe", name="a"), fx.call("probe", name="b"), fx.call("deploy", name="u")]
    calls += [fx.call("fetch", name="c"), fx.call("fetch", name="d")]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=metered_tools(meter))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            await s.wait((await s.submit("go")).id, timeout=10)
            await check_invariants(rt, "s1")
            return rt.journal.read(lambda v: check_store(v, now=0.0, at_rest=True))

    summary = run(main())
    assert meter.peak == 2
    assert summary.violations == () and summary.tool_tasks == 5


def test_the_docs_example_runs(tmp_path):
    """The tools page's "Parallel tool calls" example runs as written."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "tools.md").read_text()
    section = page.split("## Parallel tool calls", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert block is not None, "the tools page lost its parallel tool calls example"
    script = tmp_path / "parallel_example.py"
    script.write_text(block[1])
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "All four regions are ok."


def _launch(*calls: Callable[[], Awaitable[None]]) -> tuple[list, HookGate]:
    """``run_batch``'s arguments for ``calls`` that have no hook: each passes the gate at once."""
    ids = [f"t{i}" for i in range(len(calls))]
    gate = HookGate(ids)
    for task_id in ids:
        gate.passed(task_id)
    return list(zip(ids, calls, strict=True)), gate


def test_an_error_of_the_turn_cancels_the_other_calls_and_is_raised():
    """An exception out of a call is the turn's (a lost lease, a store down), not a tool's:
    its siblings are cancelled (left running for recovery, as by a crash) and it is raised."""
    finished: list[str] = []

    async def lost() -> None:
        await asyncio.sleep(0)
        raise LeaseLostError("taken over")

    async def slow() -> None:
        await asyncio.sleep(5)
        finished.append("slow")

    async def main():
        with pytest.raises(LeaseLostError):
            await run_batch(*_launch(slow, lost, slow))

    run(main(), timeout=3)
    assert finished == []


def test_a_suspend_lets_the_other_calls_finish_first():
    """A control-flow signal (Suspend) from one call: the others' results are recorded, not
    thrown away, before it is raised."""
    finished: list[str] = []

    async def stops() -> None:
        raise Suspend("shutdown")

    async def works() -> None:
        await asyncio.sleep(0.01)
        finished.append("works")

    async def main():
        with pytest.raises(Suspend):
            await run_batch(*_launch(works, stops, works))

    run(main())
    assert finished == ["works", "works"]


def test_a_hook_that_asks_a_person_stops_the_batch_before_any_call_starts(tmp_path):
    """[a, b, c] with a hook that asks about b: a's hook allowed it, but no call of the batch
    records its intent before every hook has decided, so the turn waits with nothing started.
    After the answer, a's and c's hooks are asked again (b's answer stands) and the three run
    together."""
    meter = Meter(3)
    hooked: list[str] = []

    def before_tool(tool: str, arguments: str) -> fx.Ask | None:
        name = Named.model_validate_json(arguments).name
        hooked.append(name)
        return fx.ask(f"May I probe {name}?") if name == "b" else None

    calls = [fx.call("probe", name=n) for n in "abc"]
    model = fx.ScriptedModel([fx.reply("", *calls), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=metered_tools(meter), before_tool=before_tool)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            while (question := await s.question()) is None:
                await asyncio.sleep(0.01)
            assert question.arguments == calls[1].arguments
            assert "tool.started" not in [e.type for e in events(rt, "s1")]
            assert hooked == ["a", "b"] and meter.entered == []
            await s.answer(fx.allow())
            settled = await s.wait(sub.id, timeout=10)
            await check_invariants(rt, "s1")
            summary = rt.journal.read(lambda v: check_store(v, now=0.0, at_rest=True))
            return settled, tasks(rt, sub.id), summary

    settled, recorded, summary = run(main())
    assert settled.status.value == "completed" and summary.violations == ()
    assert hooked == ["a", "b", "a", "c"]
    assert meter.peak == 3
    assert [(t.result, t.runs) for t in recorded] == [(f"{n} ok", 1) for n in "abc"]
