"""Steering (DESIGN §3.2): text typed while a turn runs reaches the model at the turn's next
model call, recorded as a user message just before that call's response. Nothing typed is
lost: with nothing in flight it becomes a submission, and steering a turn that fails is
queued as a submission of its own."""

from __future__ import annotations

import asyncio

import pydantic
import pytest
from fxrt_support import (
    FAST,
    check_invariants,
    event_types,
    events,
    fresh_store,
    read,
    run,
)

import fxdurable as fx
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import SubmissionRecord, Usage
from fxdurable.errors import SessionNotFoundError, SteeringPendingError


class Empty(pydantic.BaseModel):
    pass


def _users(request: fx.ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


def test_steering_during_a_tool_reaches_the_next_model_call(tmp_path):
    gate = asyncio.Event()
    started = asyncio.Event()
    seen: list[list[str]] = []

    async def wait_for_gate(inp: Empty, ctx: fx.ToolContext) -> str:
        started.set()
        await gate.wait()
        return "looked"

    look = fx.define_tool("look", description="look", input_model=Empty, execute=wait_for_gate)

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        seen.append([f"{m.role}:{m.text}" for m in request.messages])
        if len(seen) == 1:
            return fx.reply("looking", fx.call("look"))
        return fx.reply("done, in blue")

    agent = fx.Agent("a", model=fx.ScriptedModel(policy), tools=[look])

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            sub = await s.submit("paint it")
            await asyncio.wait_for(started.wait(), 5)
            steering = await s.steer("make it blue")
            assert steering.steered and steering.submission.id == sub.id
            gate.set()
            done = await s.wait(sub.id, timeout=5)
            assert done.result == "done, in blue"
            # The second call saw the tool result, then the steering, in that order.
            assert seen[1][-2:] == ["tool:looked", "user:make it blue"]
            history = [(m.role, m.text) for m in await s.history()]
            assert history[-2:] == [("user", "make it blue"), ("assistant", "done, in blue")]
            types = event_types(rt, "s1")
            assert types.index("steer.recorded") < types.index("steer.delivered")
            assert read(rt, lambda v: v.get_session("s1")).steering == ()
            await check_invariants(rt, "s1")

    run(main())


def test_steering_that_arrives_with_the_final_answer_earns_another_round(tmp_path):
    """The answer was given without the steering: the turn calls the model again."""
    calls: list[list[str]] = []
    box: dict[str, fx.Runtime] = {}

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        calls.append(_users(request))
        if len(calls) == 1:
            # Typed while the model was answering: recorded before the answer is.
            box["rt"].journal.steer("s1", "and mention the date")
            return fx.reply("here is the report")
        return fx.reply("here is the report, dated today")

    agent = fx.Agent("a", model=fx.ScriptedModel(policy))

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            box["rt"] = rt
            answer = await rt.session("s1").run("report", timeout=5)
            assert answer == "here is the report, dated today"
            assert calls[1] == ["report", "and mention the date"]
            history = [(m.role, m.text) for m in await rt.session("s1").history()]
            assert history == [
                ("user", "report"),
                ("assistant", "here is the report"),
                ("user", "and mention the date"),
                ("assistant", "here is the report, dated today"),
            ]
            await check_invariants(rt, "s1")

    run(main())


def test_steering_an_idle_session_admits_a_submission(tmp_path):
    agent = fx.Agent("a", model=fx.ScriptedModel(lambda r: fx.reply(f"re: {_users(r)[-1]}")))

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            await s.run("first", timeout=5)
            steering = await s.steer("second")
            assert not steering.steered
            assert steering.submission.prompt == "second"
            done = await s.wait(steering.submission.id, timeout=5)
            assert done.result == "re: second"
            assert "steer.recorded" not in event_types(rt, "s1")
            await check_invariants(rt, "s1")

    run(main())


def test_steering_an_unknown_or_foreign_session_is_not_found(tmp_path):
    store = fresh_store(tmp_path)
    journal = Journal(store, SystemClock(), RandomIds())
    journal.admit("mine", agent="a", prompt="hi", owner="alice")
    with pytest.raises(SessionNotFoundError):
        journal.steer("nobody", "hello")
    with pytest.raises(SessionNotFoundError):
        journal.steer("mine", "hello", owner="bob")
    with pytest.raises(SessionNotFoundError):
        journal.admit("mine", agent="a", prompt="more", owner="bob")
    # A trusted in-process caller (owner None) and the owner both get through.
    assert journal.steer("mine", "hello", owner="alice").steered
    assert journal.steer("mine", "again").steered


def _running_turn(tmp_path) -> tuple[Journal, SubmissionRecord, Fence]:
    """A journal with session ``s1`` whose submission ``go`` is running under a lease."""
    journal = Journal(fresh_store(tmp_path), SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    return journal, sub, fence


def test_completion_is_refused_while_steering_waits(tmp_path):
    journal, sub, fence = _running_turn(tmp_path)
    journal.record_model_call(
        fence, sub.id, round_=0, text="done", tool_calls=(), policies=(), usage=Usage()
    )
    journal.steer("s1", "wait, one more thing")
    with pytest.raises(SteeringPendingError):
        journal.settle(fence, sub.id, "completed", text="done")
    # Delivering it with the next call lets the turn complete.
    journal.record_model_call(
        fence,
        sub.id,
        round_=1,
        text="done twice",
        tool_calls=(),
        policies=(),
        usage=Usage(),
        steering=1,
    )
    journal.settle(fence, sub.id, "completed", text="done twice")
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None and session.steering == () and session.status == "idle"


def test_steering_of_a_failed_turn_is_queued_as_a_submission(tmp_path):
    journal, sub, fence = _running_turn(tmp_path)
    journal.steer("s1", "use the staging cluster")
    journal.settle(fence, sub.id, "failed", error=fx.ErrorInfo(code="x", message="boom"))
    subs = journal.read(lambda v: v.unsettled_submissions("s1"))
    assert [s.prompt for s in subs] == ["use the staging cluster"]
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None and session.steering == () and session.status == "active"


def test_abort_drops_pending_steering_and_later_steering_is_a_new_submission(tmp_path):
    store = fresh_store(tmp_path)
    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    journal.steer("s1", "faster")
    assert journal.request_abort("s1") == [sub.id]
    after = journal.steer("s1", "never mind, start over")
    assert not after.steered
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None and session.steering == ()
    types = [e.type for e in journal.read(lambda v: v.events("s1", 0, None))]
    assert types.count("steer.dropped") == 1
    assert types.count("submission.admitted") == 2


def test_a_submission_records_the_cursor_of_its_admission(tmp_path):
    agent = fx.Agent("a", model=fx.ScriptedModel(lambda r: fx.reply("ok")))

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            first = await s.submit("one")
            second = await s.submit("two")
            evs = {e.seq: e for e in events(rt, "s1")}
            for sub in (first, second):
                admitted = evs[sub.cursor]
                assert admitted.type == "submission.admitted"
                assert admitted.data["submission"] == sub.id
            await s.wait(second.id, timeout=5)

    run(main())


def test_the_invariant_checker_accounts_for_every_steering_entry(tmp_path):
    from fxdurable.testing import check_store

    store = fresh_store(tmp_path)
    journal = Journal(store, SystemClock(), RandomIds())
    journal.admit("s1", agent="a", prompt="go")
    journal.steer("s1", "one")
    journal.steer("s1", "two")
    summary = journal.read(lambda v: check_store(v, now=0.0))
    assert not [v for v in summary.violations if v.code == "steering-lost"]
    # Steering that vanishes without a delivery, drop or requeue is reported.
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None
    from dataclasses import replace

    store.transact(
        lambda tx: tx.put_session(
            replace(session, steering=(), version=session.version + 1),
            expected_version=session.version,
        )
    )
    summary = journal.read(lambda v: check_store(v, now=0.0))
    assert [v.code for v in summary.violations if v.code == "steering-lost"] == ["steering-lost"]


def test_steering_waiting_for_a_model_call_is_bounded(tmp_path):
    """The session record holds pending steering and every step rewrites it: a client that
    steers a turn busy in a long tool call gets a clear refusal instead of a growing record."""
    from fxdurable.core.journal import MAX_PENDING_STEERING

    journal, sub, fence = _running_turn(tmp_path)
    for n in range(MAX_PENDING_STEERING):
        journal.steer("s1", f"note {n}")
    with pytest.raises(fx.SteeringFullError, match="retry once they are delivered"):
        journal.steer("s1", "one too many")
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None and len(session.steering) == MAX_PENDING_STEERING
    # Delivered with the next model call, the room is back.
    journal.record_model_call(
        fence,
        sub.id,
        round_=0,
        text="noted",
        tool_calls=(),
        policies=(),
        usage=Usage(),
        steering=MAX_PENDING_STEERING,
    )
    assert journal.steer("s1", "one more").steered
