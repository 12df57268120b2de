"""Forks: ``rt.fork(source, new_id, after=...)`` starts a session from the conversation as it
was after a submission, or after any recorded step (an event cursor), at rest and with no
work; the source is not touched."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable

import pydantic
import pytest
from fxrt_support import FAST, check_invariants, events, fresh_store, read, run

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.errors import ContextLengthError
from fxdurable.runtime.model_step import SUMMARIZE_INSTRUCTIONS
from fxdurable.testing.invariants import check_store


class Empty(pydantic.BaseModel):
    pass


def _users(request: fx.ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


def _memory(request: fx.ModelRequest) -> fx.ModelResponse:
    """Answers from what the conversation it is sent says, and nothing else."""
    said = " ".join(_users(request)) + " " + request.instructions
    known = [fact for fact in ("Ada", "tea", "looked") if fact in said]
    known += ["looked"] if any(m.role == "tool" for m in request.messages) else []
    return fx.reply("I know: " + ", ".join(sorted(set(known))) if known else "I know nothing")


async def _no_violations(rt: fx.Runtime) -> None:
    summary = read(rt, lambda v: check_store(v, now=0.0, at_rest=True))
    assert summary.violations == ()


def test_a_fork_after_the_first_submission_knows_ada_and_has_never_heard_of_tea(tmp_path):
    agent = fx.Agent("a", model=fx.ScriptedModel(_memory))
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            source = rt.session("s1")
            first = await source.submit("my name is Ada")
            await source.wait(first.id, timeout=10)
            assert await source.run("I like tea", timeout=10) == "I know: Ada, tea"

            fork = await rt.fork("s1", "s2", after=first.id)
            assert fork.created and fork.messages == 2 and fork.agent == "a"
            forked = rt.session(fork.session_id)
            state = await forked.record()
            assert state is not None and state.status.value == "idle"
            assert [(m.role, m.text) for m in await forked.history()] == [
                ("user", "my name is Ada"),
                ("assistant", "I know: Ada"),
            ]
            assert await forked.run("what do you know?", timeout=10) == "I know: Ada"
            # The source goes on as before, with both facts.
            assert await source.run("and now?", timeout=10) == "I know: Ada, tea"
            created = events(rt, "s2")[0]
            assert created.type == "session.created"
            assert created.data == {
                "agent": "a",
                "forked_from": "s1",
                "after": fork.after,
                "messages": 2,
            }
            for sid in ("s1", "s2"):
                await check_invariants(rt, sid)
            await _no_violations(rt)
            trace = io.StringIO()
            assert print_trace(store, "s2", trace) == 0
            assert f"session forked from s1 after its event {fork.after} (2 messages)" in (
                trace.getvalue()
            )

    run(main())


def _looking_agent(execute: Callable[[Empty, fx.ToolContext], Awaitable[str]]) -> fx.Agent:
    """Answers "look around" with a call of ``look`` (run by ``execute``), else from memory."""
    look = fx.define_tool("look", description="look", input_model=Empty, execute=execute)

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if request.messages[-1].role == "user" and _users(request)[-1] == "look around":
            return fx.reply("looking", fx.call("look"))
        return _memory(request)

    return fx.Agent("a", model=fx.ScriptedModel(policy), tools=[look])


def test_a_fork_after_a_tool_result_holds_that_result_and_not_what_came_later(tmp_path):
    agent = _looking_agent(_looked)

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            source = rt.session("s1")
            assert await source.run("look around", timeout=10) == "I know: looked"
            tool_done = next(e for e in events(rt, "s1") if e.type == "tool.completed")
            fork = await rt.fork("s1", "s2", after=tool_done.seq)
            forked = rt.session("s2")
            history = [(m.role, m.text) for m in await forked.history()]
            # The model's final answer came after the tool result: the fork never saw it.
            assert history == [("user", "look around"), ("assistant", "looking"), ("tool", "seen")]
            assert fork.messages == 2
            copied = read(rt, lambda v: v.session_tool_tasks("s2"))
            original = read(rt, lambda v: v.session_tool_tasks("s1"))
            assert [t.status.value for t in copied] == ["completed"]
            assert copied[0].execution_id == original[0].execution_id, "the same execution"
            assert copied[0].id != original[0].id
            assert await forked.run("what do you know?", timeout=10) == "I know: looked"
            # A fork of the fork, after the fork's copies: the tool result comes along again.
            again = await rt.fork("s2", "s3", after=1)
            assert again.messages == 2
            assert [(m.role, m.text) for m in await rt.session("s3").history()] == history
            for sid in ("s1", "s2", "s3"):
                await check_invariants(rt, sid)
            await _no_violations(rt)

    run(main())


async def _looked(inp: Empty, ctx: fx.ToolContext) -> str:
    return "seen"


def test_a_fork_inside_a_parallel_round_keeps_only_the_calls_settled_by_then(tmp_path):
    looks = [
        fx.define_tool(name, description=name, input_model=Empty, execute=_looked)
        for name in ("left", "right")
    ]

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if request.messages[-1].role == "user" and _users(request)[-1] == "look both ways":
            return fx.reply("looking", fx.call("left"), fx.call("right"))
        return _memory(request)

    agent = fx.Agent("a", model=fx.ScriptedModel(policy), tools=looks)

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            await rt.session("s1").run("look both ways", timeout=10)
            first_done = next(e for e in events(rt, "s1") if e.type == "tool.completed")
            await rt.fork("s1", "s2", after=first_done.seq)
            copied = read(rt, lambda v: v.session_tool_tasks("s2"))
            assert [t.tool for t in copied] == [first_done.data["tool"]]
            reply = read(rt, lambda v: v.messages("s2"))[-1]
            assert [c.name for c in reply.tool_calls] == [first_done.data["tool"]]
            assert await rt.session("s2").run("and?", timeout=10) == "I know: looked"
            await _no_violations(rt)

    run(main())


def test_forking_again_is_idempotent_and_an_id_taken_otherwise_is_refused(tmp_path):
    agent = fx.Agent("a", model=fx.ScriptedModel(_memory))

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            first = await s.submit("my name is Ada")
            await s.wait(first.id, timeout=10)
            await s.run("I like tea", timeout=10)
            await rt.session("other").run("hello", timeout=10)
            made = await rt.fork("s1", "s2", after=first.id)
            again = await rt.fork("s1", "s2", after=first.id)
            assert again.created is False
            assert (again.after, again.messages) == (made.after, made.messages)
            assert len(events(rt, "s2")) == 1, "the repeat wrote nothing"
            with pytest.raises(fx.SessionExistsError):
                await rt.fork("s1", "s2")  # another point
            with pytest.raises(fx.SessionExistsError):
                await rt.fork("s1", "other", after=first.id)  # not a fork at all
            with pytest.raises(fx.SessionNotFoundError):
                await rt.fork("nope", "s3")
            with pytest.raises(fx.ForkPointError):
                await rt.fork("s1", "s3", after=10_000)
            with pytest.raises(fx.ForkPointError):
                await rt.fork("s1", "s3", after="sub-unknown")
            with pytest.raises(fx.ForkPointError):
                await rt.fork("s1", "s3", after=read(rt, lambda v: v.submissions("other"))[0].id)
            assert read(rt, lambda v: v.get_session("s3")) is None
            await _no_violations(rt)

    run(main())


def test_a_source_with_a_running_turn_forks_at_a_point_before_it(tmp_path):
    gate = asyncio.Event()
    started = asyncio.Event()

    async def wait_for_gate(inp: Empty, ctx: fx.ToolContext) -> str:
        started.set()
        await gate.wait()
        return "seen"

    agent = _looking_agent(wait_for_gate)

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            first = await s.submit("my name is Ada")
            await s.wait(first.id, timeout=10)
            running = await s.submit("look around")
            await asyncio.wait_for(started.wait(), 10)
            with pytest.raises(fx.ForkPointError):
                await rt.fork("s1", "s2", after=running.id)  # not settled yet
            now = await rt.fork("s1", "s2")  # everything recorded so far: no running call
            forked = rt.session("s2")
            assert [m.role for m in await forked.history()] == ["user", "assistant"] * 2
            assert now.messages == 4, "the running round's reply is kept without its call"
            assert await forked.run("who am I?", timeout=10) == "I know: Ada"
            gate.set()
            assert (await s.wait(running.id, timeout=10)).result == "I know: Ada, looked"
            for sid in ("s1", "s2"):
                await check_invariants(rt, sid)
            await _no_violations(rt)

    run(main())


def test_a_fork_after_a_compaction_takes_the_summary(tmp_path):
    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if request.instructions.startswith(SUMMARIZE_INSTRUCTIONS):
            return fx.reply("SUMMARY: the user is Ada")
        if sum(len(m.text) for m in request.messages) > 2_500:
            raise ContextLengthError("prompt is too long")
        return _memory(request)

    agent = fx.Agent("a", model=fx.ScriptedModel(policy), instructions="")

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("s1")
            await s.run("my name is Ada " + "x" * 1_000, timeout=10)
            for n in range(3):
                await s.run(f"q{n} " + "x" * 1_000, timeout=10)
            source = await s.record()
            assert source is not None and source.compacted_upto > 0, "the run compacted"
            await rt.fork("s1", "s2")
            fork = read(rt, lambda v: v.get_session("s2"))
            assert fork is not None and fork.compacted_upto == source.compacted_upto
            # Ada is known only through the summary, which the fork's model is sent.
            assert await rt.session("s2").run("short", timeout=10) == "I know: Ada"
            await _no_violations(rt)

    run(main())


def test_the_invariant_checker_flags_a_fork_holding_unsettled_or_missing_copies(tmp_path):
    """``fxdurable check`` audits forks: a copied call left unsettled, or copies that do not
    add up to what ``session.created`` says was copied, are violations."""
    from dataclasses import replace

    from fxdurable.core.records import MessageRecord
    from fxdurable.core.states import ToolTaskStatus

    look = fx.define_tool("look", description="look", input_model=Empty, execute=_looked)

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if request.messages[-1].role == "user":
            return fx.reply("looking", fx.call("look"))
        return _memory(request)

    agent = fx.Agent("a", model=fx.ScriptedModel(policy), tools=[look])
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            await rt.session("s1").run("look around", timeout=10)
            await rt.fork("s1", "s2")
            await _no_violations(rt)

    run(main())
    store = fresh_store(tmp_path)

    def tamper(tx):  # type: ignore[no-untyped-def]
        (task,) = tx.session_tool_tasks("s2")
        tx.put_tool_task(
            replace(task, status=ToolTaskStatus.RUNNING, version=task.version + 1),
            expected_version=task.version,
        )
        session = tx.get_session("s2")
        tx.append_message(
            MessageRecord(
                session_id="s2", seq=session.next_message_seq, turn_id="sub-x@s2", role="user",
                text="smuggled", cursor=999,
            )
        )  # fmt: skip

    store.transact(tamper)
    codes = {v.code for v in store.read(lambda v: check_store(v, now=0.0)).violations}
    assert codes == {
        "fork-copied-unsettled",
        "fork-copy-mismatch",
        "message-gap",
        "message-cursor-ahead",
    }


def test_a_fork_of_a_subagent_call_shares_its_child_and_the_checker_accepts_it(tmp_path):
    """A copied subagent call names its source's child (nothing runs again), and the child
    names the source's call: ``fxdurable check`` found that a mismatch until it was told
    that a fork's copy is the same execution as the call the child names."""
    child = fx.Agent("researcher", fx.ScriptedModel([fx.reply("the answer is 42")]))
    research = fx.subagent(child, name="research", description="Delegate a research task.")
    parent = fx.Agent(
        "lead",
        fx.ScriptedModel([fx.reply("", fx.call("research", task="find it")), fx.reply("it is 42")]),
        tools=[research],
    )

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("p1").run("what is the answer?", timeout=10) == "it is 42"
            await rt.fork("p1", "p2")
            [original] = read(rt, lambda v: v.session_tool_tasks("p1"))
            [copy] = read(rt, lambda v: v.session_tool_tasks("p2"))
            assert copy.id != original.id
            assert (copy.execution_id, copy.child_session) == (
                original.execution_id,
                original.child_session,
            )
            await _no_violations(rt)

    run(main())


def test_the_invariant_checker_flags_a_copied_reply_whose_results_do_not_add_up(tmp_path):
    """A fork is whole when every call its copied replies name has its copied result (a long
    fork is staged on DynamoDB before one commit shows it): one result too many or too few
    for a reply is a violation."""
    from dataclasses import replace

    from fxdurable.core.clock import tool_task_id

    look = fx.define_tool("look", description="look", input_model=Empty, execute=_looked)

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if request.messages[-1].role == "user":
            return fx.reply("looking", fx.call("look"))
        return _memory(request)

    agent = fx.Agent("a", model=fx.ScriptedModel(policy), tools=[look])
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([agent], store=store, settings=FAST) as rt:
            await rt.session("s1").run("look around", timeout=10)
            await rt.fork("s1", "s2")
            await _no_violations(rt)

    run(main())
    store = fresh_store(tmp_path)

    def tamper(tx):  # type: ignore[no-untyped-def]
        (task,) = tx.session_tool_tasks("s2")
        extra = replace(task, id=tool_task_id(task.turn_id, task.round, 1), index=1)
        tx.put_tool_task(extra, expected_version=None)

    store.transact(tamper)
    codes = {v.code for v in store.read(lambda v: check_store(v, now=0.0)).violations}
    assert codes == {"fork-copy-results"}
