"""Persisted state (``ctx.state``): per-session key/value, JSON values, committed atomically
with the step that wrote it. A call reads the state committed before it started plus its own
writes; only a call that completes writes (with its result, or a durable tool's step with its
record); ``session.state()`` shows what was committed. Every change is a ``state.changed``
event, and the state is their fold (``fxdurable check``).

Crashes are simulated here by driving the journal as a dead worker would have left it; the real
SIGKILLs are in ``tests/crash/test_crash_state.py`` and ``tests/workers/test_rq_state_crash.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from collections.abc import Callable, Sequence
from typing import Any

import pydantic
import pytest
from fxrt_support import (
    FAST,
    check_invariants,
    db_url,
    events,
    last_user_text,
    leave_crashed_turn,
    owned_store,
    read,
    rounds_done,
    run,
    tasks,
    tool_messages,
)

import fxdurable as fx
from fxdurable.cli.render import Style, describe
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import EventRecord, ToolCallRequest, Usage
from fxdurable.core.session_state import MAX_STATE_BYTES, StateWrites
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import IllegalTransitionError, StateError
from fxdurable.runtime.state import ToolState
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import Effect, check_effects, check_store

StateFn = Callable[[Any, fx.ToolContext], Any]


class Args(pydantic.BaseModel):
    key: str = "k"
    value: Any = None


def state_tool(
    name: str, fn: StateFn, *, replay: fx.ReplayPolicy = "safe", timeout_s: float = 30.0
) -> fx.Tool:
    return fx.define_tool(
        name,
        description=name,
        input_model=Args,
        execute=fn,
        replay=replay,
        timeout_s=timeout_s,
    )


def remember(inp: Args, ctx: fx.ToolContext) -> str:
    ctx.state[inp.key] = inp.value
    return f"{inp.key} saved"


def recall(inp: Args, ctx: fx.ToolContext) -> str:
    return repr(ctx.state.get(inp.key, "<none>"))


def forget(inp: Args, ctx: fx.ToolContext) -> str:
    ctx.state.delete(inp.key)
    return f"{inp.key} forgotten"


TOOLS = [
    state_tool("remember", remember),
    state_tool("recall", recall),
    state_tool("forget", forget),
]


def by_turn(turns: Sequence[Sequence[fx.ModelResponse]]) -> fx.ScriptedModel:
    """Submission ``turn <n>`` is answered by ``turns[n]``, one reply per round."""

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        replies = turns[int(last_user_text(request).removeprefix("turn "))]
        return replies[min(rounds_done(request), len(replies) - 1)]

    return fx.ScriptedModel(policy)


def state_changes(evs: Sequence[EventRecord]) -> list[dict[str, Any]]:
    return [dict(e.data) for e in evs if e.type == "state.changed"]


def run_turns(
    url: str,
    tools: Sequence[fx.Tool],
    turns: Sequence[Sequence[fx.ModelResponse]],
) -> tuple[list[Any], dict[str, Any], list[EventRecord]]:
    """Each of ``turns`` is one submission, answered by its scripted replies in order. Returns
    the settled submissions with their tasks, ``session.state()`` and the session's events."""
    agent = fx.Agent("a", by_turn(turns), tools=list(tools))

    async def main() -> tuple[list[Any], dict[str, Any], list[EventRecord]]:
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            session = rt.session("s1")
            done = []
            for n in range(len(turns)):
                sub = await session.submit(f"turn {n}")
                settled = await session.wait(sub.id, timeout=10)
                done.append((settled, tasks(rt, sub.id)))
            await check_invariants(rt, "s1")
            summary = read(rt, lambda v: check_store(v, now=time.time(), at_rest=True))
            assert summary.violations == ()
            return done, await session.state(), events(rt, "s1")

    return run(main())


def test_a_call_reads_committed_state_and_its_own_writes_and_commits_with_its_result(
    tmp_path: Any,
) -> None:
    seen: list[Any] = []

    def profile(inp: Args, ctx: fx.ToolContext) -> str:
        seen.append(dict(ctx.state))  # what earlier calls committed
        ctx.state["plan"] = "pro"
        ctx.state.set("seats", 3)
        ctx.state.update({"tags": ("a", "b")})
        seen.append((ctx.state["plan"], ctx.state.get("seats"), ctx.state["tags"]))
        del ctx.state["name"]
        seen.append(("name" in ctx.state, sorted(ctx.state), len(ctx.state)))
        return "profile updated"

    turns = [
        [fx.reply("saving", fx.call("remember", key="name", value="Ada")), fx.reply("saved")],
        [fx.reply("updating", fx.call("profile")), fx.reply("updated")],
        [fx.reply("reading", fx.call("recall", key="tags")), fx.reply("read")],
    ]
    done, state, evs = run_turns(db_url(tmp_path), [*TOOLS, state_tool("profile", profile)], turns)
    assert [sub.status.value for sub, _ in done] == ["completed"] * 3
    assert seen == [
        {"name": "Ada"},
        ("pro", 3, ["a", "b"]),  # its own writes, through JSON (the tuple is a list)
        (False, ["plan", "seats", "tags"], 3),
    ]
    (_, (recalled,)) = done[2]
    assert recalled.result == "['a', 'b']"
    assert state == {"plan": "pro", "seats": 3, "tags": ["a", "b"]}
    changes = state_changes(evs)
    assert [(c["set"], c["deleted"], c["tool"], c.get("step")) for c in changes] == [
        ({"name": "Ada"}, [], "remember", None),
        ({"plan": "pro", "seats": 3, "tags": ["a", "b"]}, ["name"], "profile", None),
    ]
    # Each change is written just before the result it commits with, in its transaction.
    for change in (e for e in evs if e.type == "state.changed"):
        after = evs[change.seq]  # seqs start at 1: this is the next event
        assert (after.type, after.data["task"]) == ("tool.completed", change.data["task"])
    traced = [describe(e, Style(io.StringIO())) for e in evs if e.type == "state.changed"]
    assert traced == [
        "tool remember state set name",
        "tool profile state set plan, seats, tags; deleted name",
    ]


def test_two_calls_of_one_response_each_keep_their_keys_and_the_later_commit_wins_a_key(
    tmp_path: Any,
) -> None:
    calls = [
        fx.call("remember", key="a", value=1),
        fx.call("remember", key="b", value=2),
        fx.call("remember", key="a", value=3),
    ]
    done, state, evs = run_turns(db_url(tmp_path), TOOLS, [[fx.reply("x", *calls), fx.reply("ok")]])
    assert [t.status.value for t in done[0][1]] == ["completed"] * 3
    assert state == {"a": 3, "b": 2}
    assert [c["set"] for c in state_changes(evs)] == [{"a": 1}, {"b": 2}, {"a": 3}]


def test_a_call_that_raises_commits_nothing(tmp_path: Any) -> None:
    def half_done(inp: Args, ctx: fx.ToolContext) -> str:
        ctx.state["started"] = True
        raise RuntimeError("the API said no")

    turns = [
        [fx.reply("x", fx.call("remember", key="kept", value=1)), fx.reply("ok")],
        [fx.reply("x", fx.call("half_done")), fx.reply("it failed")],
    ]
    done, state, evs = run_turns(
        db_url(tmp_path), [*TOOLS, state_tool("half_done", half_done)], turns
    )
    (task,) = done[1][1]
    assert task.status.value == "failed" and "the API said no" in (task.result or "")
    assert state == {"kept": 1}
    assert len(state_changes(evs)) == 1


def test_a_value_that_is_not_json_fails_at_the_write_naming_the_key_not_the_value(
    tmp_path: Any,
) -> None:
    caught: list[str] = []

    def careful(inp: Args, ctx: fx.ToolContext) -> str:
        for key, value in (("secret", {"token-xyz-123": {1, 2}}), (7, "x"), ("", "x")):
            try:
                ctx.state[key] = value
            except StateError as exc:
                caught.append(str(exc))
        ctx.state["ok"] = "yes"
        return "done"

    def careless(inp: Args, ctx: fx.ToolContext) -> str:
        ctx.state["when"] = time  # a module
        return "unreachable"

    tools = [*TOOLS, state_tool("careful", careful), state_tool("careless", careless)]
    turns = [
        [fx.reply("x", fx.call("careful")), fx.reply("ok")],
        [fx.reply("x", fx.call("careless")), fx.reply("it failed")],
    ]
    done, state, _ = run_turns(db_url(tmp_path), tools, turns)
    assert "ctx.state['secret']: a dict is not JSON" in caught[0]
    assert "token-xyz-123" not in caught[0], "a value may be a secret: never in the message"
    assert ["non-empty strings" in c for c in caught[1:]] == [True, True]
    (careless_task,) = done[1][1]
    assert careless_task.status.value == "failed"
    assert "StateError: ctx.state['when']: a module is not JSON" in (careless_task.result or "")
    assert state == {"ok": "yes"}


def test_writes_past_the_bound_fail_the_call_and_commit_nothing(tmp_path: Any) -> None:
    big = "x" * (MAX_STATE_BYTES // 2)
    turns = [
        [fx.reply("x", fx.call("remember", key="a", value=big)), fx.reply("ok")],
        [fx.reply("x", fx.call("remember", key="b", value=big)), fx.reply("too big")],
        [fx.reply("x", fx.call("forget", key="a")), fx.reply("ok")],
    ]
    done, state, evs = run_turns(db_url(tmp_path), TOOLS, turns)
    (refused,) = done[1][1]
    assert refused.status.value == "failed"
    assert refused.result is not None and refused.result.startswith("StateError: ")
    assert f"over its {MAX_STATE_BYTES}-byte bound" in refused.result
    assert "the writes to 'b' were not committed" in refused.result
    assert [sorted(c["set"]) or c["deleted"] for c in state_changes(evs)] == [["a"], ["a"]]
    assert state == {}


def test_a_cancelled_call_and_a_timed_out_unsafe_call_never_wrote(tmp_path: Any) -> None:
    """An abort cancels a safe call (``cancelled``); an unsafe call that times out is
    ``outcome_unknown``: neither commits what it wrote before it was stopped."""
    started = asyncio.Event()

    async def slow(inp: Args, ctx: fx.ToolContext) -> str:
        ctx.state[inp.key] = "written"
        started.set()
        await asyncio.sleep(30)
        return "unreachable"

    tools = [
        *TOOLS,
        state_tool("slow_safe", slow),
        state_tool("slow_unsafe", slow, replay="unsafe", timeout_s=0.2),
    ]
    model = by_turn(
        [
            [fx.reply("x", fx.call("slow_safe", key="safe"))],
            [fx.reply("x", fx.call("slow_unsafe", key="unsafe")), fx.reply("unknown")],
        ]
    )
    agent = fx.Agent("a", model, tools=tools)

    async def main() -> None:
        async with fx.Runtime([agent], store=owned_store(db_url(tmp_path)), settings=FAST) as rt:
            session = rt.session("s1")
            first = await session.submit("turn 0")
            await asyncio.wait_for(started.wait(), 10)
            await session.abort()
            assert (await session.wait(first.id, timeout=10)).status.value == "aborted"
            second = await session.submit("turn 1")
            assert (await session.wait(second.id, timeout=10)).status.value == "completed"
            statuses = [t.status.value for s in (first, second) for t in tasks(rt, s.id)]
            assert statuses == ["cancelled", "outcome_unknown"]
            assert await session.state() == {}
            assert not state_changes(events(rt, "s1"))
            await check_invariants(rt, "s1")

    run(main())


def test_a_call_recovery_settles_unknown_never_wrote_and_the_next_turn_sees_the_old_state(
    tmp_path: Any,
) -> None:
    """The dead worker's unsafe call was running: whatever it wrote was in its memory only.
    Recovery records it ``outcome_unknown``; the state is what was committed before."""
    url = db_url(tmp_path)

    def seeded(journal: Journal, fence: Fence) -> None:
        (done, running) = journal.read(lambda v: v.tool_tasks(v.submissions("s1")[0].id))
        journal.start_tool(fence, done.id)
        journal.finish_tool(
            fence,
            done.id,
            ToolTaskStatus.COMPLETED,
            "plan saved",
            writes=StateWrites(set={"plan": "free"}),
        )
        journal.start_tool(fence, running.id)

    leave_crashed_turn(
        url,
        agent="a",
        prompt="turn 0",
        calls=[
            fx.call("remember", key="plan", value="free"),
            fx.call("upgrade", key="plan", value="pro"),
        ],
        policies=["safe", "unsafe"],
        after=seeded,
    )
    upgrades: list[str] = []

    def upgrade(inp: Args, ctx: fx.ToolContext) -> str:
        upgrades.append(inp.value)
        ctx.state[inp.key] = inp.value
        return "upgraded"

    model = by_turn(
        [
            # The crashed turn (its round 0 recorded): told of the unknown outcome.
            [fx.reply("unused"), fx.reply("The upgrade's outcome is unknown; not repeating it.")],
            [fx.reply("checking", fx.call("recall", key="plan")), fx.reply("the plan is free")],
        ]
    )
    agent = fx.Agent("a", model, tools=[*TOOLS, state_tool("upgrade", upgrade, replay="unsafe")])

    async def main() -> None:
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            session = rt.session("s1")
            crashed_sub = read(rt, lambda v: v.submissions("s1")[0])
            await session.wait(crashed_sub.id, timeout=10)
            (_, unknown) = tasks(rt, crashed_sub.id)
            assert unknown.status.value == "outcome_unknown" and upgrades == []
            assert await session.state() == {"plan": "free"}
            assert await session.run("turn 1", timeout=10) == "the plan is free"
            (recalled,) = tasks(rt, read(rt, lambda v: v.submissions("s1")[1].id))
            assert recalled.result == "'free'"
            assert tool_messages(model.requests[-1])[-1].text == "'free'"
            assert [c["set"] for c in state_changes(events(rt, "s1"))] == [{"plan": "free"}]
            await check_invariants(rt, "s1")

    run(main())


# -- durable tools ---------------------------------------------------------------------------


class Tenant(pydantic.BaseModel):
    name: str


def onboarding(log: list[str]) -> fx.Tool:
    """A durable tool: writes before each step commit with it, the rest with the result."""

    async def onboard(inp: Tenant, ctx: fx.ToolContext) -> str:
        ctx.state["tenant"] = inp.name
        tenant = await ctx.step("tenant", lambda: log.append("tenant") or f"t-{inp.name}")
        ctx.state["tenant_id"] = tenant
        await ctx.step("dns", lambda: log.append("dns") or "ok")
        ctx.state["ready"] = True
        return f"{tenant} ready"

    return fx.define_tool(
        "onboard", description="onboard", input_model=Tenant, execute=onboard, durable=True
    )


def test_a_durable_tool_commits_its_writes_with_each_step_and_the_rest_with_its_result(
    tmp_path: Any,
) -> None:
    log: list[str] = []
    turns = [[fx.reply("x", fx.call("onboard", name="acme")), fx.reply("ok")]]
    _, state, evs = run_turns(db_url(tmp_path), [onboarding(log)], turns)
    assert state == {"tenant": "acme", "tenant_id": "t-acme", "ready": True}
    changes = [(c["set"], c.get("step")) for c in state_changes(evs)]
    assert changes == [
        ({"tenant": "acme"}, "tenant"),
        ({"tenant_id": "t-acme"}, "dns"),
        ({"ready": True}, None),
    ]
    kinds = [e.type for e in evs if e.type in ("state.changed", "tool.step", "tool.completed")]
    assert kinds == ["state.changed", "tool.step"] * 2 + ["state.changed", "tool.completed"]


def test_a_durable_tool_re_executed_after_a_crash_keeps_its_recorded_steps_writes_once(
    tmp_path: Any,
) -> None:
    """The dead run recorded step ``tenant`` with its write; the re-execution replays that
    step (the write made before it again is the step's, already committed: dropped), and
    commits what comes after."""
    url = db_url(tmp_path)

    def midway(journal: Journal, fence: Fence) -> None:
        (task,) = journal.read(lambda v: v.tool_tasks(v.submissions("s1")[0].id))
        journal.start_tool(fence, task.id, durable=True)
        journal.record_step(
            fence,
            task.id,
            name="tenant",
            value='"t-old"',
            writes=StateWrites(set={"tenant": "acme"}),
        )

    leave_crashed_turn(
        url,
        agent="a",
        calls=[fx.call("onboard", name="acme")],
        policies=["unsafe"],
        after=midway,
    )
    log: list[str] = []
    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("ok")])  # round 0 was recorded
    agent = fx.Agent("a", model, tools=[onboarding(log)])

    async def main() -> None:
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            session = rt.session("s1")
            sub = read(rt, lambda v: v.submissions("s1")[0])
            assert (await session.wait(sub.id, timeout=10)).status.value == "completed"
            assert log == ["dns"]
            assert await session.state() == {
                "tenant": "acme",
                "tenant_id": "t-old",
                "ready": True,
            }
            changes = [(c["set"], c.get("step")) for c in state_changes(events(rt, "s1"))]
            assert changes == [
                ({"tenant": "acme"}, "tenant"),  # the dead run's, never repeated
                ({"tenant_id": "t-old"}, "dns"),
                ({"ready": True}, None),
            ]
            await check_invariants(rt, "s1")

    run(main())


# -- the journal, forks, the checker ---------------------------------------------------------


def _journal_with_tasks(store: SqliteStore, n: int) -> tuple[Journal, Fence, list[str]]:
    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit("s1", agent="a", prompt="go").submission
    fence = journal.claim("s1", WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    calls = [ToolCallRequest(name="remember", arguments="{}") for _ in range(n)]
    made = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=calls, policies=["safe"] * n, usage=Usage()
    ).tasks
    return journal, fence, [t.id for t in made]


def test_commits_merge_into_the_state_read_in_their_transaction(tmp_path: Any) -> None:
    """Both calls started from an empty state; each commit merges only its own keys into the
    state as it is at commit time, so neither loses the other's."""
    store = SqliteStore(db_url(tmp_path))
    try:
        journal, fence, (a, b) = _journal_with_tasks(store, 2)
        journal.start_tool(fence, a)
        journal.start_tool(fence, b)
        done = ToolTaskStatus.COMPLETED
        journal.finish_tool(fence, b, done, "b", writes=StateWrites(set={"b": 1, "x": "b"}))
        journal.finish_tool(fence, a, done, "a", writes=StateWrites(set={"a": 1, "x": "a"}))
        session = store.read(lambda v: v.get_session("s1"))
        assert session is not None and dict(session.state) == {"a": 1, "b": 1, "x": "a"}
    finally:
        store.close()


def test_the_journal_refuses_writes_with_a_result_that_is_not_completed(tmp_path: Any) -> None:
    store = SqliteStore(db_url(tmp_path))
    try:
        journal, fence, (task,) = _journal_with_tasks(store, 1)
        journal.start_tool(fence, task)
        with pytest.raises(IllegalTransitionError, match="state writes"):
            journal.finish_tool(
                fence,
                task,
                ToolTaskStatus.OUTCOME_UNKNOWN,
                "unknown",
                writes=StateWrites(set={"a": 1}),
            )
        session = store.read(lambda v: v.get_session("s1"))
        assert session is not None and dict(session.state) == {}
    finally:
        store.close()


def test_a_fork_takes_the_state_as_it_was_at_its_point(tmp_path: Any) -> None:
    turns = [
        [fx.reply("x", fx.call("remember", key="name", value="Ada")), fx.reply("ok")],
        [fx.reply("x", fx.call("remember", key="drink", value="tea")), fx.reply("ok")],
    ]
    agent = fx.Agent("a", by_turn(turns), tools=TOOLS)

    async def main() -> None:
        async with fx.Runtime([agent], store=owned_store(db_url(tmp_path)), settings=FAST) as rt:
            source = rt.session("s1")
            first = await source.submit("turn 0")
            await source.wait(first.id, timeout=10)
            second = await source.submit("turn 1")
            await source.wait(second.id, timeout=10)
            evs = events(rt, "s1")
            changed = [e.seq for e in evs if e.type == "state.changed"]
            result_of = {e.seq: e for e in evs if e.type == "tool.completed"}
            # Points before, at and after the second write (its change and its result are
            # one step: a point at the change means the step, result included).
            points: dict[str, int | str | None] = {
                "start": 1,
                "first submission": first.id,
                "before second write": changed[1] - 1,
                "at second change": changed[1],
                "at second result": changed[1] + 1,
                "now": None,
            }
            assert changed[1] + 1 in result_of
            expected = {
                "start": {},
                "first submission": {"name": "Ada"},
                "before second write": {"name": "Ada"},
                "at second change": {"name": "Ada", "drink": "tea"},
                "at second result": {"name": "Ada", "drink": "tea"},
                "now": {"name": "Ada", "drink": "tea"},
            }
            for n, (label, after) in enumerate(points.items()):
                fork = await rt.fork("s1", f"f{n}", after=after)
                assert await rt.session(fork.session_id).state() == expected[label], label
                fork_events = events(rt, fork.session_id)
                assert len(state_changes(fork_events)) == (1 if expected[label] else 0)
            # A fork of a fork carries the state on; the fork's own writes are its own.
            again = await rt.fork("f1", "f1b")
            assert await rt.session(again.session_id).state() == {"name": "Ada"}
            assert await source.state() == expected["now"]
            for sid in ("s1", "f0", "f1", "f2", "f3", "f4", "f5", "f1b"):
                await check_invariants(rt, sid)
            summary = read(rt, lambda v: check_store(v, now=time.time(), at_rest=True))
            assert summary.violations == ()

    run(main())


def test_the_checker_flags_state_that_is_not_the_fold_of_its_events(tmp_path: Any) -> None:
    """Forged past the journal, which never writes either: a state changed with no event, and
    a ``state.changed`` whose call did not complete in the same transaction."""
    url = db_url(tmp_path)
    turns = [[fx.reply("x", fx.call("remember", key="a", value=1)), fx.reply("ok")]]
    run_turns(url, TOOLS, turns)
    store = SqliteStore(url)
    try:
        session = store.read(lambda v: v.get_session("s1"))
        assert session is not None
        forged = dataclasses.replace(session, state={"a": 2}, version=session.version + 1)
        store.transact(lambda tx: tx.put_session(forged, expected_version=session.version))
        found = store.read(lambda v: check_store(v, now=time.time(), at_rest=True)).violations
        assert [(v.code, v.session_id) for v in found] == [("state-not-fold", "s1")]
        assert "at keys ['a']" in found[0].detail
    finally:
        store.close()

    def orphan_change(journal: Journal, fence: Fence) -> None:
        (task,) = journal.read(lambda v: v.tool_tasks(v.submissions("s2")[0].id))
        journal.start_tool(fence, task.id)

    leave_crashed_turn(
        url,
        agent="a",
        session_id="s2",
        calls=[fx.call("remember")],
        policies=["unsafe"],
        after=orphan_change,
    )
    store = SqliteStore(url)
    try:
        session = store.read(lambda v: v.get_session("s2"))
        assert session is not None
        (task,) = store.read(lambda v: v.session_tool_tasks("s2"))
        change = EventRecord(
            session_id="s2",
            seq=session.next_event_seq,
            type="state.changed",
            turn_id=task.turn_id,
            data={"set": {"a": 1}, "deleted": [], "task": task.id, "tool": task.tool},
            at=time.time(),
        )

        def forge(tx: Any) -> None:
            tx.append_event(change)
            tx.put_session(
                dataclasses.replace(
                    session,
                    state={"a": 1},
                    next_event_seq=session.next_event_seq + 1,
                    version=session.version + 1,
                ),
                expected_version=session.version,
            )

        store.transact(forge)
        found = store.read(lambda v: check_store(v, now=time.time(), at_rest=False)).violations
        codes = [v.code for v in found if v.session_id == "s2"]
        assert codes == ["state-without-completion"], found
    finally:
        store.close()


def test_ctx_state_outside_a_run_is_an_empty_buffer_that_seals() -> None:
    """A ``ToolContext`` built by hand (a unit test of a tool) has a working ``ctx.state``;
    the runtime seals it when the call is over."""
    ctx = fx.ToolContext(execution_id="e", session_id="s", tool_name="t", attempt=1)
    ctx.state["a"] = [1]
    got = ctx.state["a"]
    got.append(2)  # a read is a copy
    assert ctx.state["a"] == [1]
    assert "a" in repr(ctx.state) and "[1]" not in repr(ctx.state)
    state = ToolState({"kept": 1, "gone": 2}, tool="t")
    state.delete("gone")
    state.delete("never there")
    assert state.pending() == StateWrites(set={}, deleted=("gone",))
    with pytest.raises(KeyError):
        del state["never there"]
    assert state.seal() == StateWrites(set={}, deleted=("gone",))
    with pytest.raises(StateError, match="after the call finished"):
        state["late"] = 1


def test_a_guarded_call_may_complete_without_an_effect_only_if_it_says_so(tmp_path: Any) -> None:
    """``check_effects``: a completed idempotent call took effect once, unless it logged that
    its guard (here, ``ctx.state``) found the effect taken already (``Effect(noop=True)``)."""

    def send_once(inp: Args, ctx: fx.ToolContext) -> str:
        if ctx.state.get("sent"):
            return "already sent"
        ctx.state["sent"] = True
        return "sent"

    url = db_url(tmp_path)
    call = [fx.reply("x", fx.call("send_once")), fx.reply("ok")]
    run_turns(url, [state_tool("send_once", send_once, replay="idempotent")], [call, call])
    store = SqliteStore(url)
    try:
        first, second = store.read(lambda v: v.session_tool_tasks("s1"))
        assert (first.result, second.result) == ("sent", "already sent")
        sent = Effect("send_once", first.execution_id)
        (missing,) = store.read(lambda v: check_effects(v, [sent]))
        assert missing.code == "effect-missing" and second.id in missing.detail
        guarded = Effect("send_once", second.execution_id, noop=True)
        assert store.read(lambda v: check_effects(v, [sent, guarded])) == []
    finally:
        store.close()


# No heartbeat and no scan within the test: they are transactions of their own.
QUIET = fx.WorkerSettings(lease_ttl_s=60.0, heartbeat_s=30.0, scan_interval_s=600.0)


class CountingStore(SqliteStore):
    """Counts transactions (a state write must add none)."""

    transactions = 0

    def transact(self, body: Any) -> Any:
        self.transactions += 1
        return super().transact(body)


@pytest.mark.parametrize("writes", [False, True])
def test_a_state_write_costs_no_transaction_of_its_own(tmp_path: Any, writes: bool) -> None:
    """It rides in the call's result commit (the session record that commit rewrites anyway),
    and a call's ``ctx.state`` comes back from its intent's commit (no read): a turn whose
    call writes state costs what the same turn without the write costs."""

    def maybe_write(inp: Args, ctx: fx.ToolContext) -> str:
        if writes:
            ctx.state["k"] = {"big": "x" * 1000}
        return "done"

    store = CountingStore(db_url(tmp_path))
    agent = fx.Agent(
        "a",
        by_turn([[fx.reply("x", fx.call("maybe_write")), fx.reply("ok")]]),
        tools=[state_tool("maybe_write", maybe_write)],
    )
    counted: dict[str, int] = {}

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=QUIET) as rt:
            session = rt.session("s1")
            sub = await session.submit("turn 0")
            before = store.transactions
            await session.wait(sub.id, timeout=10)
            await check_invariants(rt, "s1")
            counted["transactions"] = store.transactions - before
            counted["state changes"] = len(state_changes(events(rt, "s1")))

    try:
        run(main())
    finally:
        store.close()
    assert counted["state changes"] == (1 if writes else 0)
    # The claim with the attempt it begins (one commit), the model's call with the tool
    # call's intent (one commit), its result, the final model call, the settlement, the
    # release: the same with a state write or without.
    assert counted["transactions"] == 6, counted


def test_a_batch_committing_its_results_together_fails_only_the_call_past_the_bound(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two async safe calls finish in the same turn of the loop, so their results are tried
    as one commit (``finish_tools``); the one whose writes pass the bound makes it refuse,
    and each is then recorded alone: the small write commits, the big call fails."""
    tried: list[int] = []
    group_commit = Journal.finish_tools

    def counted(self: Journal, fence: Any, results: Any, **kwargs: Any) -> Any:
        tried.append(len(results))
        return group_commit(self, fence, results, **kwargs)

    monkeypatch.setattr(Journal, "finish_tools", counted)

    async def remember_now(inp: Args, ctx: fx.ToolContext) -> str:
        ctx.state[inp.key] = inp.value
        return f"{inp.key} saved"

    tool = state_tool("remember", remember_now)
    big = "x" * MAX_STATE_BYTES
    calls = [fx.call("remember", key="small", value="s"), fx.call("remember", key="big", value=big)]
    done, state, _ = run_turns(db_url(tmp_path), [tool], [[fx.reply("x", *calls), fx.reply("ok")]])
    assert tried == [2]
    small, refused = done[0][1]
    assert small.status.value == "completed" and small.result == "small saved"
    assert refused.status.value == "failed"
    assert refused.result is not None and refused.result.startswith("StateError: ")
    assert state == {"small": "s"}
