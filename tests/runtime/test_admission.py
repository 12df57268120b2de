"""Admission: per-session FIFO, settling exactly once, when_busy="reject", request ids."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pydantic
import pytest
from fxrt_support import (
    FAST,
    TERMINAL_EVENTS,
    check_invariants,
    event_types,
    events,
    fresh_store,
    last_user_text,
    read,
    run,
    submission,
    tool_messages,
)

import fxdurable as fx
from fxdurable.errors import RequestConflictError


class Wait(pydantic.BaseModel):
    seconds: float


def _slow_session_agent(active: list[int], peak: list[int], order: list[str]) -> fx.Agent:
    @fx.tool
    async def work(inp: Wait, ctx: fx.ToolContext) -> str:
        "Work for a while."
        active.append(1)
        peak[0] = max(peak[0], len(active))
        await asyncio.sleep(inp.seconds)
        active.pop()
        return "worked"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        prompt = last_user_text(request)
        if not tool_messages(request):
            order.append(prompt)
            return fx.reply("", fx.call("work", seconds=0.05))
        return fx.reply(f"done {prompt}")

    return fx.Agent("eng", fx.ScriptedModel(policy), tools=[work])


def test_submissions_of_a_session_run_one_at_a_time_in_admission_order(tmp_path):
    active: list[int] = []
    peak = [0]
    order: list[str] = []
    agent = _slow_session_agent(active, peak, order)

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, concurrency=4
        ) as rt:
            s = rt.session("s1")
            subs = [await s.submit(p) for p in ("first", "second", "third")]
            assert [submission(rt, x.id).seq for x in subs] == [1, 2, 3]  # admission order
            assert [x.status.value for x in subs] == ["queued"] * 3
            settled = [await s.wait(x.id, timeout=10) for x in subs]
            assert [x.status.value for x in settled] == ["completed"] * 3
            assert [x.result for x in settled] == ["done first", "done second", "done third"]
            assert order == ["first", "second", "third"]
            assert peak == [1]

            evs = events(rt, "s1")
            started = [e.data["prompt"] for e in evs if e.type == "turn.started"]
            assert started == ["first", "second", "third"]
            # attempts do not overlap: each begins after the previous submission settled
            spans = []
            for sub in subs:
                begin = min(
                    e.seq for e in evs if e.type == "attempt.started" and e.turn_id == sub.id
                )
                end = max(
                    e.seq
                    for e in evs
                    if e.type in TERMINAL_EVENTS and e.data.get("submission") == sub.id
                )
                spans.append((begin, end))
            assert spans == sorted(spans)
            for (_, end), (begin, _) in itertools.pairwise(spans):
                assert end < begin
            for sub in subs:
                attempts = read(rt, lambda v, sub=sub: v.attempts(sub.id))
                assert [(a.status.value, a.reason) for a in attempts] == [("finished", "completed")]
            await check_invariants(rt, "s1")

    run(main())


def test_every_submission_settles_exactly_once(tmp_path):
    agent = fx.Agent("eng", fx.ScriptedModel(lambda r: fx.reply(f"ok {last_user_text(r)}")))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            subs = [await s.submit(f"p{n}") for n in range(6)]
            for _ in range(5):  # duplicate wakes are harmless hints
                await s.resume()
            for sub in subs:
                assert (await s.wait(sub.id, timeout=10)).status.value == "completed"
            await asyncio.sleep(0.3)  # let the duplicate wakes and a scan run
            terminal = Counter(
                e.data["submission"] for e in events(rt, "s1") if e.type in TERMINAL_EVENTS
            )
            assert terminal == Counter({sub.id: 1 for sub in subs})
            assert event_types(rt, "s1").count("turn.started") == 6
            await check_invariants(rt, "s1")

    run(main())


def test_when_busy_reject_raises_and_admits_nothing(tmp_path):
    gate = asyncio.Event()

    @fx.tool
    async def block(inp: Wait, ctx: fx.ToolContext) -> str:
        "Block until released."
        await gate.wait()
        return "released"

    model = fx.ScriptedModel([fx.reply("", fx.call("block", seconds=0)), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=[block])

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            # an idle (or new) session admits with reject
            first = await s.submit("first", when_busy="reject")
            before = events(rt, "s1")
            with pytest.raises(fx.AgentBusyError) as caught:
                await s.submit("second", when_busy="reject")
            assert caught.value.session_id == "s1"
            assert isinstance(caught.value, fx.FxDurableError)
            assert [x.id for x in read(rt, lambda v: v.submissions("s1"))] == [first.id]
            assert events(rt, "s1")[: len(before)] == before
            assert "second" not in [e.data.get("prompt") for e in events(rt, "s1")]
            gate.set()
            assert (await s.wait(first.id, timeout=10)).status.value == "completed"
            # at rest again: reject admits
            third = await s.submit("third", when_busy="reject")
            assert (await s.wait(third.id, timeout=10)).status.value == "completed"
            subs = read(rt, lambda v: v.submissions("s1"))
            assert [x.prompt for x in subs] == ["first", "third"]
            assert [x.seq for x in subs] == [1, 2]
            await check_invariants(rt, "s1")

    run(main())


def test_when_busy_must_be_queue_or_reject(tmp_path):
    agent = fx.Agent("eng", fx.ScriptedModel([fx.reply("x")]))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            with pytest.raises(ValueError):
                await rt.session("s1").submit("p", when_busy="drop")  # type: ignore[arg-type]
            assert read(rt, lambda v: v.get_session("s1")) is None

    run(main())


def test_retried_submit_with_the_same_request_id_is_one_submission(tmp_path):
    model = fx.ScriptedModel(lambda r: fx.reply(f"ok {last_user_text(r)}"))
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            a = await s.submit("deploy", request_id="req-1")
            b = await s.submit("deploy", request_id="req-1")
            assert a.id == b.id
            assert a.request_id == "req-1"
            assert (await s.wait(a.id, timeout=10)).status.value == "completed"
            # a retry after it settled still returns the same, settled submission
            c = await s.submit("deploy", request_id="req-1")
            assert c.id == a.id and c.status.value == "completed"
            assert await s.run("deploy", request_id="req-1", timeout=10) == "ok deploy"
            await asyncio.sleep(0.1)
            assert len(read(rt, lambda v: v.submissions("s1"))) == 1
            assert len(model.requests) == 1
            types = event_types(rt, "s1")
            assert types.count("submission.admitted") == 1
            assert types.count("turn.started") == 1
            # a request id belongs to one session
            with pytest.raises(RequestConflictError):
                await rt.session("s2").submit("deploy", request_id="req-1")
            await check_invariants(rt, "s1")

    run(main())


def test_a_session_stays_bound_to_its_agent(tmp_path):
    a = fx.Agent("a", fx.ScriptedModel([fx.reply("from a")]))
    b = fx.Agent("b", fx.ScriptedModel([fx.reply("from b")]))

    async def main():
        async with fx.Runtime([a, b], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("s1", agent="a").run("hi", timeout=10) == "from a"
            with pytest.raises(fx.AgentMismatchError):
                await rt.session("s1", agent="b").submit("hi")
            with pytest.raises(fx.ConfigurationError):
                rt.session("s2")  # several agents: name one
            assert len(read(rt, lambda v: v.submissions("s1"))) == 1

    run(main())


def test_submit_and_wait_return_the_public_submission_view(tmp_path):
    """Callers get ``fx.Submission`` (frozen, no storage bookkeeping), not the journal's
    record, whose fields may change with the storage format."""
    agent = fx.Agent("eng", fx.ScriptedModel(lambda r: fx.reply("done")))

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            admitted = await s.submit("go", request_id="r1")
            assert isinstance(admitted, fx.Submission)
            assert (admitted.session_id, admitted.request_id) == ("s1", "r1")
            assert admitted.status == "queued" and not admitted.settled
            assert admitted.result is None and admitted.error is None
            assert admitted.cursor == submission(rt, admitted.id).cursor
            with pytest.raises(AttributeError):
                admitted.status = fx.SubmissionStatus.COMPLETED  # type: ignore[misc]
            assert not hasattr(admitted, "version") and not hasattr(admitted, "prompt")

            settled = await s.wait(admitted.id, timeout=10)
            assert isinstance(settled, fx.Submission) and settled.settled
            assert settled.status == fx.SubmissionStatus.COMPLETED and settled.result == "done"
            assert (settled.attempts, settled.interruptions) == (1, 0)
            assert await s.submission(admitted.id) == settled
            assert await s.submission("nope") is None

    run(main())
