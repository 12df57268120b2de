"""Leases, lost wake-ups, unknown agents, continuations at a deadline and graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import threading
import time

import pydantic
import pytest
from fxrt_support import (
    FAST,
    NO_SCAN,
    check_invariants,
    db_url,
    dead_pid,
    event_types,
    events,
    fresh_store,
    last_user_text,
    owned_store,
    read,
    rounds_done,
    run,
    submission,
    tasks,
)

import fxdurable as fx
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.core.records import SubmissionRecord, Usage
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock

HOST = socket.gethostname()


class Step(pydantic.BaseModel):
    n: int


def _stepping_agent(steps: int, *, sleep_s: float = 0.0, max_attempts: int = 10) -> fx.Agent:
    """``steps`` tool rounds, each a tool call that sleeps ``sleep_s``, then an answer."""

    @fx.tool
    async def step(inp: Step, ctx: fx.ToolContext) -> str:
        "One step."
        await asyncio.sleep(sleep_s)
        return f"step {inp.n} done"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        done = rounds_done(request)
        if done < steps:
            return fx.reply(f"step {done}", fx.call("step", n=done))
        return fx.reply(f"all {steps} steps done")

    return fx.Agent(
        "eng",
        fx.ScriptedModel(policy),
        tools=[step],
        durability=fx.Durability(max_attempts=max_attempts),
    )


def _open_journal(url: str, clock=None) -> tuple[SqliteStore, Journal]:
    store = SqliteStore(url)
    return store, Journal(store, clock or SystemClock(), RandomIds())


# -- continuation ------------------------------------------------------------------------------


def test_tiny_invocation_budget_completes_through_continuations(tmp_path):
    """Each wake stops at a step boundary, yet the turn completes (DESIGN §1: a turn spans any
    number of invocations). Yielded attempts do not consume max_attempts."""
    agent = _stepping_agent(3, max_attempts=1)

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, invocation_budget_s=0.0001
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            settled = await s.wait(sub.id, timeout=3)
            assert settled.status.value == "completed"
            assert settled.result == "all 3 steps done"
            assert settled.interruptions == 0
            types = event_types(rt, "s1")
            assert types.count("attempt.yielded") >= 1
            assert "attempt.interrupted" not in types
            await check_invariants(rt, "s1")

    run(main(), timeout=15)


def test_small_invocation_budget_yields_at_step_boundaries(tmp_path):
    """A budget shorter than a step: every wake does about one step, then yields."""
    agent = _stepping_agent(3, sleep_s=0.3, max_attempts=1)

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, invocation_budget_s=0.2
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            settled = await s.wait(sub.id, timeout=10)
            assert settled.status.value == "completed"
            assert settled.result == "all 3 steps done"
            assert settled.interruptions == 0
            attempts = read(rt, lambda v: v.attempts(sub.id))
            assert len(attempts) >= 3
            assert [a.status.value for a in attempts[:-1]] == ["yielded"] * (len(attempts) - 1)
            assert {a.reason for a in attempts[:-1]} == {"deadline"}
            assert attempts[-1].status.value == "finished"
            evs = events(rt, "s1")
            assert [e.type for e in evs].count("attempt.yielded") == len(attempts) - 1
            # every step ran exactly once across the continuations
            recorded = tasks(rt, sub.id)
            assert [(t.round, t.runs, t.status.value) for t in recorded] == [
                (n, 1, "completed") for n in range(3)
            ]
            assert [e.data["round"] for e in evs if e.type == "model.completed"] == [0, 1, 2, 3]
            await check_invariants(rt, "s1")

    run(main())


def test_continuation_wake_is_not_lost_when_the_release_is_slow(tmp_path):
    """DESIGN §9 for continuations: the continuation wake is enqueued before the lease is
    released; another worker that takes that wake before the release sees the lease held and
    drops it. The release must re-check for unsettled work (as the end of a normal run does)
    and wake the session again. No periodic scan here (SQS/Lambda have none)."""
    agent = _stepping_agent(3, sleep_s=0.3)

    async def main():
        async with fx.Runtime(
            [agent],
            store=fresh_store(tmp_path),
            settings=NO_SCAN,
            invocation_budget_s=0.2,
            concurrency=4,
        ) as rt:
            original_release = rt.journal.release

            def slow_release(fence):
                time.sleep(0.05)  # a store round trip slower than a wake's delivery
                return original_release(fence)

            rt.journal.release = slow_release  # type: ignore[method-assign]
            s = rt.session("s1")
            sub = await s.submit("go")
            settled = await s.wait(sub.id, timeout=4)
            assert settled.status.value == "completed"
            assert "attempt.yielded" in event_types(rt, "s1")

    run(main())


def test_heartbeats_keep_a_long_step_owned(tmp_path):
    """A tool call longer than the lease TTL: heartbeats extend the lease, so the scan never
    hands the session to a second worker and the call runs once."""
    runs: list[int] = []

    @fx.tool(replay="unsafe")
    async def long_call(inp: Step, ctx: fx.ToolContext) -> str:
        "Long."
        runs.append(ctx.attempt)
        await asyncio.sleep(1.0)
        return "done"

    model = fx.ScriptedModel([fx.reply("", fx.call("long_call", n=1)), fx.reply("finished")])
    agent = fx.Agent("eng", model, tools=[long_call])
    settings = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=0.3, scan_interval_s=0.05)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=settings) as rt:
            s = rt.session("s1")
            assert await s.run("go", timeout=5) == "finished"
            sub = read(rt, lambda v: v.submissions("s1"))[0]
            assert runs == [1]
            assert sub.interruptions == 0 and sub.attempts == 1
            assert read(rt, lambda v: v.get_session("s1")).lease.token == 1
            await check_invariants(rt, "s1")

    run(main())


def test_hard_shutdown_leaves_the_lease_to_expire_and_the_work_is_recovered(tmp_path):
    """A step that cannot reach a boundary within the grace period keeps its lease; once it
    expires the work is recovered like a crash."""
    clock = FakeClock()
    url = db_url(tmp_path)
    runs: list[int] = []

    @fx.tool
    async def stuck(inp: Step, ctx: fx.ToolContext) -> str:
        "Takes long the first time."
        runs.append(ctx.attempt)
        if len(runs) == 1:
            await asyncio.sleep(30)
        return f"run {len(runs)}"

    model = fx.ScriptedModel([fx.reply("", fx.call("stuck", n=1)), fx.reply("finished")])
    agent = fx.Agent("eng", model, tools=[stuck])

    async def main():
        rt = fx.Runtime(
            [agent], store=owned_store(url), settings=FAST, clock=clock, shutdown_grace_s=0.1
        )
        await rt.start()
        sub = await rt.session("s1").submit("go")
        while not runs:
            await asyncio.sleep(0.01)
        await rt.aclose()
        held = read(rt, lambda v: v.get_session("s1")).lease
        assert held.owner is not None  # kept: it expires instead
        assert tasks(rt, sub.id)[0].status.value == "running"

        async with fx.Runtime([agent], store=owned_store(url), settings=FAST, clock=clock) as rt2:
            await asyncio.sleep(0.3)
            assert submission(rt2, sub.id).status.value == "running"  # same pid: wait for TTL
            clock.advance(FAST.lease_ttl_s + 1)
            settled = await rt2.session("s1").wait(sub.id, timeout=3)
            assert settled.status.value == "completed"
            assert settled.interruptions == 1
            (task,) = tasks(rt2, sub.id)
            assert (task.result, task.runs) == ("run 2", 2)
            await check_invariants(rt2, "s1")

    run(main())


def test_graceful_shutdown_yields_and_another_runtime_finishes(tmp_path):
    url = db_url(tmp_path)
    agent = _stepping_agent(2, sleep_s=0.3)

    async def main():
        rt = fx.Runtime([agent], store=owned_store(url), settings=FAST, shutdown_grace_s=5)
        await rt.start()
        s = rt.session("s1")
        sub = await s.submit("go")
        await asyncio.sleep(0.1)  # the first step (a 0.3 s tool call) is running
        await rt.aclose()  # SIGTERM: stop at the next step boundary
        store, journal = _open_journal(url)
        try:
            left = journal.read(lambda v: v.get_submission(sub.id))
            attempts = journal.read(lambda v: v.attempts(sub.id))
            session = journal.read(lambda v: v.get_session("s1"))
            left_tasks = journal.read(lambda v: v.tool_tasks(sub.id))
        finally:
            store.close()
        assert left.status.value == "running"
        assert [(a.status.value, a.reason) for a in attempts] == [("yielded", "shutdown")]
        assert session.lease.owner is None  # released, not left to expire
        assert [(t.status.value, t.runs) for t in left_tasks] == [("completed", 1)]

        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt2:
            settled = await rt2.session("s1").wait(sub.id, timeout=10)
            assert settled.status.value == "completed"
            assert settled.interruptions == 0
            assert [t.runs for t in tasks(rt2, sub.id)] == [1, 1]
            await check_invariants(rt2, "s1")

    run(main())


# -- lost wake-ups (DESIGN §9) -----------------------------------------------------------------


def test_release_reports_work_admitted_while_the_lease_was_held(tmp_path):
    store, journal = _open_journal(db_url(tmp_path))
    try:
        me = WorkerIdentity(host=HOST, pid=12345)
        first = journal.admit("s1", agent="eng", prompt="one").submission
        fence = journal.claim("s1", me, ttl_s=60)
        assert fence is not None
        journal.begin_attempt(fence, first.id, worker="w")
        journal.settle(fence, first.id, "completed", text="ok")
        # a handler admits while the lease is held; its wake is dropped (lease looks held)
        journal.admit("s1", agent="eng", prompt="two")
        assert journal.claim("s1", WorkerIdentity(host=HOST, pid=54321), ttl_s=60) is None
        assert journal.release(fence) is True
        # with nothing unsettled, release says so
        fence = journal.claim("s1", me, ttl_s=60)
        assert fence is not None
        second = journal.read(lambda v: v.unsettled_submissions("s1"))[0]
        journal.begin_attempt(fence, second.id, worker="w")
        journal.settle(fence, second.id, "completed", text="ok")
        assert journal.release(fence) is False
    finally:
        store.close()


def test_submission_admitted_between_the_last_check_and_the_release_still_runs(tmp_path):
    """The worker has seen no more work and is releasing; a submission lands just before the
    release and its wake is lost. The release-and-check must re-enqueue (no scan here)."""
    model = fx.ScriptedModel(lambda r: fx.reply(f"ok {last_user_text(r)}"))
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=NO_SCAN) as rt:
            journal = rt.journal
            original_release = journal.release
            late: list[SubmissionRecord] = []
            admitted_late = threading.Event()

            def racing_release(fence):
                if not late:  # the first release of the session: admit "just before" it
                    late.append(journal.admit("s1", agent="eng", prompt="late").submission)
                    admitted_late.set()
                return original_release(fence)

            journal.release = racing_release  # type: ignore[method-assign]
            s = rt.session("s1")
            assert await s.run("first", timeout=5) == "ok first"
            # run() returns once the submission settles; the release comes after that, on the
            # worker's own schedule, so wait for it rather than expect it to have happened.
            released = await asyncio.to_thread(admitted_late.wait, 3)
            assert released, "the worker never released the lease"
            settled = await s.wait(late[0].id, timeout=3)
            assert settled.status.value == "completed"
            assert settled.result == "ok late"
            await check_invariants(rt, "s1")

    run(main())


def test_periodic_scan_finds_queued_work_without_a_wake(tmp_path):
    model = fx.ScriptedModel([fx.reply("found you")])
    agent = fx.Agent("eng", model)

    async def main():
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            await asyncio.sleep(0.05)  # after the start-up reconciliation
            sub = rt.journal.admit("s1", agent="eng", prompt="hello").submission  # no wake
            settled = await rt.session("s1").wait(sub.id, timeout=2)  # ~a few scan intervals
            assert settled.status.value == "completed"
            assert settled.result == "found you"
            await check_invariants(rt, "s1")

    run(main())


def test_startup_reconciliation_runs_work_left_queued(tmp_path):
    url = db_url(tmp_path)
    store, journal = _open_journal(url)
    try:
        sub = journal.admit("s1", agent="eng", prompt="left over").submission
    finally:
        store.close()
    agent = fx.Agent("eng", fx.ScriptedModel([fx.reply("done")]))

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=NO_SCAN) as rt:
            settled = await rt.session("s1").wait(sub.id, timeout=3)
            assert settled.status.value == "completed"

    run(main())


# -- unknown agents ----------------------------------------------------------------------------


def test_session_of_an_agent_this_runtime_lacks_is_left_intact(tmp_path, caplog):
    url = db_url(tmp_path)
    store, journal = _open_journal(url)
    try:
        sub = journal.admit("s1", agent="a", prompt="for a").submission
        before = journal.read(lambda v: v.events("s1"))
        session_before = journal.read(lambda v: v.get_session("s1"))
    finally:
        store.close()
    b = fx.Agent("b", fx.ScriptedModel([fx.reply("b answers")]))

    async def main():
        async with fx.Runtime([b], store=owned_store(url), settings=FAST) as rt:
            with pytest.raises(fx.UnknownAgentError) as caught:
                rt.session("x", agent="nope")
            assert caught.value.agent_name == "nope"
            assert isinstance(caught.value, fx.ConfigurationError)
            await rt.session("s1", agent="b").resume()
            await asyncio.sleep(0.5)  # start-up reconciliation, a resume and a couple of scans
            assert submission(rt, sub.id).status.value == "queued"
            assert read(rt, lambda v: v.events("s1")) == before
            assert read(rt, lambda v: v.get_session("s1")) == session_before

    with caplog.at_level(logging.ERROR, logger="fxdurable"):
        run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors, "an unknown agent is logged as an error"
    assert any("'a'" in r.getMessage() and "s1" in r.getMessage() for r in errors)

    a = fx.Agent("a", fx.ScriptedModel([fx.reply("a answers")]))

    async def later():
        async with fx.Runtime([a], store=owned_store(url), settings=FAST) as rt:
            settled = await rt.session("s1").wait(sub.id, timeout=5)
            assert settled.result == "a answers"
            await check_invariants(rt, "s1")

    run(later())


# -- leases ------------------------------------------------------------------------------------


def test_lease_of_a_dead_local_process_is_taken_over_at_once(tmp_path):
    url = db_url(tmp_path)
    store, journal = _open_journal(url)
    try:
        sub = journal.admit("s1", agent="eng", prompt="p").submission
        pid = dead_pid()
        assert journal.claim("s1", WorkerIdentity(host=HOST, pid=pid), ttl_s=600) is not None
    finally:
        store.close()
    agent = fx.Agent("eng", fx.ScriptedModel([fx.reply("taken over")]))

    async def main():
        async with fx.Runtime([agent], store=owned_store(url), settings=NO_SCAN) as rt:
            settled = await rt.session("s1").wait(sub.id, timeout=3)  # not after 600 s
            assert settled.result == "taken over"
            await check_invariants(rt, "s1")
            assert read(rt, lambda v: v.get_session("s1")).lease.token == 2

    run(main())


@pytest.mark.parametrize("where", ["other host", "live local process"])
def test_lease_of_a_live_owner_is_left_alone_until_it_expires(tmp_path, where):
    url = db_url(tmp_path)
    clock = FakeClock()
    holder = None
    if where == "other host":
        owner = WorkerIdentity(host=HOST + "-elsewhere", pid=dead_pid())
    else:
        holder = subprocess.Popen(["sleep", "30"])
        owner = WorkerIdentity(host=HOST, pid=holder.pid)
    try:
        store, journal = _open_journal(url, clock)
        try:
            sub = journal.admit("s1", agent="eng", prompt="p").submission
            assert journal.claim("s1", owner, ttl_s=60) is not None
            lease = journal.read(lambda v: v.get_session("s1")).lease
        finally:
            store.close()
        agent = fx.Agent("eng", fx.ScriptedModel([fx.reply("after expiry")]))

        async def main():
            async with fx.Runtime(
                [agent], store=owned_store(url), settings=FAST, clock=clock
            ) as rt:
                s = rt.session("s1")
                await s.resume()
                await asyncio.sleep(0.7)  # reconciliation, a resume and a few scans
                assert submission(rt, sub.id).status.value == "queued"
                assert read(rt, lambda v: v.get_session("s1")).lease == lease
                assert "attempt.started" not in event_types(rt, "s1")
                clock.advance(61)  # the lease expires
                settled = await s.wait(sub.id, timeout=3)
                assert settled.result == "after expiry"
                await check_invariants(rt, "s1")

        run(main())
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()


def test_a_worker_whose_lease_was_taken_over_cannot_write(tmp_path):
    clock = FakeClock()
    store, journal = _open_journal(db_url(tmp_path), clock)
    try:
        sub = journal.admit("s1", agent="eng", prompt="p").submission
        old = journal.claim("s1", WorkerIdentity(host="h1", pid=1), ttl_s=10)
        assert old is not None
        journal.begin_attempt(old, sub.id, worker="h1:1")
        clock.advance(11)
        new = journal.claim("s1", WorkerIdentity(host="h2", pid=2), ttl_s=10)
        assert new is not None and new.token == old.token + 1
        events_before = journal.read(lambda v: v.events("s1"))
        with pytest.raises(fx.LeaseLostError):
            journal.heartbeat(old, ttl_s=10)
        with pytest.raises(fx.LeaseLostError):
            journal.record_model_call(
                old, sub.id, round_=0, text="x", tool_calls=[], policies=[], usage=Usage()
            )
        with pytest.raises(fx.LeaseLostError):
            journal.settle(old, sub.id, "completed", text="stale")
        assert journal.release(old) is False
        assert journal.read(lambda v: v.get_session("s1")).lease.owner == new.owner
        assert journal.read(lambda v: v.events("s1")) == events_before
        journal.heartbeat(new, ttl_s=10)
    finally:
        store.close()


def _steal(journal: Journal, session_id: str) -> None:
    """Take the session's lease as a (now dead) process of this host would have."""
    thief = WorkerIdentity(host=HOST, pid=dead_pid())
    fence = journal.claim(session_id, thief, ttl_s=600, holder_is_dead=lambda host, pid: True)
    assert fence is not None


@pytest.mark.parametrize("noticed_by", ["heartbeat", "next write"])
def test_runtime_stops_writing_after_losing_its_lease_and_the_work_is_recovered(
    tmp_path, noticed_by
):
    """Another worker takes the lease mid-tool (then dies). The first worker must not write
    the tool's result; the runtime (one worker task) must go on to recover the session."""
    runs: list[int] = []
    state: dict[str, asyncio.Event] = {}

    @fx.tool
    async def work(inp: Step, ctx: fx.ToolContext) -> str:
        "Work."
        runs.append(ctx.attempt)
        if len(runs) == 1:
            state["in_tool"].set()
            await state["stolen"].wait()
            if noticed_by == "heartbeat":
                await asyncio.sleep(5)  # the heartbeat cancels this first
        return f"run {len(runs)}"

    model = fx.ScriptedModel([fx.reply("", fx.call("work", n=1)), fx.reply("finished")])
    agent = fx.Agent("eng", model, tools=[work])
    settings = (
        fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)
        if noticed_by == "heartbeat"
        else fx.WorkerSettings(heartbeat_s=60, lease_ttl_s=120, scan_interval_s=0.2)
    )

    async def main():
        state["in_tool"] = asyncio.Event()
        state["stolen"] = asyncio.Event()
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=settings, concurrency=1
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            await asyncio.wait_for(state["in_tool"].wait(), 5)
            _steal(rt.journal, "s1")
            state["stolen"].set()
            settled = await s.wait(sub.id, timeout=5)
            assert settled.status.value == "completed"
            assert settled.interruptions == 1
            (task,) = tasks(rt, sub.id)
            assert task.result == "run 2"  # the first run's result was never written
            assert task.runs == 2
            assert event_types(rt, "s1").count("tool.completed") == 1
            await check_invariants(rt, "s1")
            # and the runtime (a single worker task) still serves other sessions
            assert await rt.session("s2").run("again", timeout=5) == "finished"

    run(main())
