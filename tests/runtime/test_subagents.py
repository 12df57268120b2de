"""Subagents (``fx.subagent``): a tool that runs a child durable session and returns its answer.

The child's session and submission ids derive from the call's execution id, so a re-executed
call reattaches; the call drives the child inline within the parent's budgets; a viewer of the
parent sees the child's streamed text in the call's progress; failures name the child.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from dataclasses import replace

import pydantic
import pytest
from fxrt_support import (
    FAST,
    NO_SCAN,
    Meter,
    check_invariants,
    db_url,
    events,
    fresh_store,
    last_user_text,
    leave_crashed_turn,
    owned_store,
    read,
    rounds_done,
    run,
    submission,
    tasks,
    tool_messages,
)

import fxdurable as fx
from fxdurable.cli.trace import print_trace
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import SessionRecord, SubmissionRecord, Usage
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.subagent import child_request_id, child_session_id
from fxdurable.runtime.subagent import with_delegates
from fxdurable.testing import check_store


class Lookup(pydantic.BaseModel):
    topic: str


def researcher(model: fx.ScriptedModel, tools: list[fx.Tool] | None = None) -> fx.Agent:
    return fx.Agent("researcher", model, instructions="research", tools=tools or [])


def lead(child: fx.Agent, model: fx.ScriptedModel) -> fx.Agent:
    research = fx.subagent(child, name="research", description="Delegate a research task.")
    return fx.Agent("lead", model, tools=[research])


def recording_lookup(looked_up: list[str]) -> fx.Tool:
    """The child's ``lookup``: appends each topic it looks up to ``looked_up``."""

    @fx.tool
    def lookup(inp: Lookup, ctx: fx.ToolContext) -> str:
        "Look a topic up."
        looked_up.append(inp.topic)
        return f"{inp.topic}: 42"

    return lookup


def violations(rt: fx.Runtime) -> list[str]:
    summary = read(rt, lambda v: check_store(v, now=time.time(), at_rest=True))
    return [str(v) for v in summary.violations]


def test_a_subagent_call_returns_the_childs_answer_and_links_both_sessions(tmp_path):
    looked_up: list[str] = []
    lookup = recording_lookup(looked_up)

    child = researcher(
        fx.ScriptedModel(
            [fx.reply("", fx.call("lookup", topic="answers")), fx.reply("the answer is 42")]
        ),
        [lookup],
    )
    parent = lead(
        child,
        fx.ScriptedModel(
            [fx.reply("", fx.call("research", task="find the answer")), fx.reply("it is 42")]
        ),
    )

    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([parent], store=store, settings=FAST) as rt:
            assert await rt.session("p1").run("what is the answer?", timeout=20) == "it is 42"
            sub = next(s for s in read(rt, lambda v: v.submissions("p1")))
            [call] = tasks(rt, sub.id)
            child_id = child_session_id("p1", call.execution_id)
            assert (call.status, call.result, call.child_session, call.policy) == (
                "completed",
                "the answer is 42",
                child_id,
                "idempotent",
            )
            child_session = read(rt, lambda v: v.get_session(child_id))
            assert child_session is not None
            assert (child_session.agent, child_session.parent_session) == ("researcher", "p1")
            assert child_session.parent_task == call.id
            [child_sub] = read(rt, lambda v: v.submissions(child_id))
            assert child_sub.request_id == child_request_id(call.execution_id)
            assert (child_sub.prompt, child_sub.result_text) == (
                "find the answer",
                "the answer is 42",
            )
            created = events(rt, child_id)[0]
            assert created.data == {
                "agent": "researcher",
                "parent_session": "p1",
                "parent_task": call.id,
            }
            assert looked_up == ["answers"]
            # Readable like any session, by its agent's name.
            history = await rt.session(child_id, agent="researcher").history()
            assert history[0].text == "find the answer"
            await check_invariants(rt, "p1")
            await check_invariants(rt, child_id)
            assert violations(rt) == []
            trace = io.StringIO()
            assert print_trace(store, child_id, trace) == 0
            assert (
                f"subagent session for agent researcher, started by call {call.id} of session p1"
            ) in trace.getvalue()

    run(main())


def test_a_failed_child_fails_the_call_naming_it_and_the_parent_goes_on(tmp_path):
    def broken(request: fx.ModelRequest) -> fx.ModelResponse:
        raise fx.ModelError("401 invalid api key")

    child = researcher(fx.ScriptedModel(broken))
    parent_model = fx.ScriptedModel(
        [fx.reply("", fx.call("research", task="find it")), fx.reply("could not research")]
    )
    parent = lead(child, parent_model)

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("p1").run("go", timeout=20) == "could not research"
            [sub] = read(rt, lambda v: v.submissions("p1"))
            [call] = tasks(rt, sub.id)
            assert call.status == "failed" and call.child_session is not None
            assert call.result is not None and call.result.startswith(
                f"SubagentError: subagent session {call.child_session} failed: "
            )
            assert "401 invalid api key" in call.result
            [child_sub] = read(rt, lambda v: v.submissions(call.child_session))
            assert child_sub.status == "failed"
            # The parent's model read the failure as the call's result.
            assert call.child_session in parent_model.requests[-1].messages[-1].text
            await check_invariants(rt, "p1")
            assert violations(rt) == []

    run(main())


def test_a_viewer_of_the_parent_sees_the_childs_text_and_tool_progress_mid_call(tmp_path):
    seen_tool = threading.Event()

    @fx.tool
    async def fetch(inp: Lookup, ctx: fx.ToolContext) -> str:
        "Fetch pages."
        ctx.progress(f"fetching {inp.topic} page 1\n")
        while not seen_tool.is_set():
            await asyncio.sleep(0.005)
        return "two pages"

    answer = "the pages agree: " + "forty-two " * 20
    child = researcher(
        fx.ScriptedModel(
            [fx.reply("", fx.call("fetch", topic="answers")), fx.reply(answer)],
            chunk_size=8,
            delay_s=0.02,
        ),
        [fetch],
    )
    parent = lead(
        child, fx.ScriptedModel([fx.reply("", fx.call("research", task="read")), fx.reply("ok")])
    )

    async def progress_with(s: fx.SessionHandle, text: str) -> fx.ToolTask:
        while True:  # the viewer polls the parent, as a UI would
            running = await s.running_task()
            if running is not None and running.progress and text in running.progress:
                return running
            await asyncio.sleep(0.005)

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("p1")
            sub = await s.submit("research it")
            running = await asyncio.wait_for(progress_with(s, "fetching answers page 1"), 10)
            assert running.tool == "research" and running.status == "running"
            seen_tool.set()
            running = await asyncio.wait_for(progress_with(s, "the pages agree"), 10)
            assert running.tool == "research"
            assert (await s.wait(sub.id, timeout=20)).result == "ok"
            [call] = tasks(rt, sub.id)
            assert (call.result, call.progress) == (answer, None)  # the result replaced it
            await check_invariants(rt, "p1")

    run(main(), timeout=30)


def test_a_parent_at_its_deadline_suspends_and_its_call_resumes_the_child(tmp_path):
    """Invocations too short for more than one step: the parent suspends with its call
    running, every next attempt re-executes the call, which reattaches to the same child and
    goes on from the child's last recorded step."""
    looked_up: list[str] = []
    lookup = recording_lookup(looked_up)

    child_model = fx.ScriptedModel(
        [
            fx.reply("", fx.call("lookup", topic="a")),
            fx.reply("", fx.call("lookup", topic="b")),
            fx.reply("a and b are 42"),
        ]
    )
    child = researcher(child_model, [lookup])
    parent = lead(
        child,
        fx.ScriptedModel([fx.reply("", fx.call("research", task="a and b")), fx.reply("42")]),
    )

    async def main() -> None:
        async with fx.Runtime(
            [parent], store=fresh_store(tmp_path), settings=FAST, invocation_budget_s=0.0001
        ) as rt:
            assert await rt.session("p1").run("go", timeout=20) == "42"
            [sub] = read(rt, lambda v: v.submissions("p1"))
            [call] = tasks(rt, sub.id)
            assert call.status == "completed" and call.result == "a and b are 42"
            assert call.runs > 1  # re-executed by continuations, never left unknown
            assert submission(rt, sub.id).interruptions == 0
            child_id = call.child_session
            assert child_id is not None
            assert [s.id for s in read(rt, lambda v: v.list_sessions())] == ["p1", child_id]
            assert len(read(rt, lambda v: v.submissions(child_id))) == 1
            # Each of the child's steps ran once: three model calls, two lookups.
            assert looked_up == ["a", "b"]
            assert len(child_model.requests) == 3
            yielded = [e for e in events(rt, child_id) if e.type == "attempt.yielded"]
            assert yielded  # the child, too, stopped at its boundaries
            await check_invariants(rt, "p1")
            await check_invariants(rt, child_id)
            assert violations(rt) == []

    run(main(), timeout=30)


@pytest.mark.parametrize("budget_s", [None, 0.0001], ids=["one-invocation", "step-by-step"])
def test_grandchildren_nest_their_ids_and_answers(tmp_path, budget_s):
    """Three levels. ``step-by-step``: invocations too short for more than one step, so
    every level suspends inside its call again and again; each re-executed call reattaches to
    its child, recursively, and every model round of every level is asked once."""
    looked_up: list[str] = []
    fetcher_model = fx.ScriptedModel(
        [fx.reply("", fx.call("lookup", topic="page")), fx.reply("page text")]
    )
    fetcher = fx.Agent("fetcher", fetcher_model, tools=[recording_lookup(looked_up)])
    fetch = fx.subagent(fetcher, name="fetch", description="Fetch a page.")
    child_model = fx.ScriptedModel(
        [fx.reply("", fx.call("fetch", task="get it")), fx.reply("read: page")]
    )
    child = fx.Agent("researcher", child_model, tools=[fetch])
    parent_model = fx.ScriptedModel([fx.reply("", fx.call("research", task="r")), fx.reply("done")])
    parent = lead(child, parent_model)
    assert [a.name for a in with_delegates([parent])] == ["lead", "researcher", "fetcher"]

    async def main() -> None:
        async with fx.Runtime(
            [parent], store=fresh_store(tmp_path), settings=FAST, invocation_budget_s=budget_s
        ) as rt:
            assert await rt.session("p1").run("go", timeout=20) == "done"
            [sub] = read(rt, lambda v: v.submissions("p1"))
            [call] = tasks(rt, sub.id)
            assert call.result == "read: page"
            child_id = call.child_session
            assert child_id is not None
            [child_sub] = read(rt, lambda v: v.submissions(child_id))
            [grand_call] = tasks(rt, child_sub.id)
            assert grand_call.result == "page text"
            grandchild = read(rt, lambda v: v.get_session(grand_call.child_session or ""))
            assert grandchild is not None and grandchild.parent_session == child_id
            assert grandchild.id == child_session_id(child_id, grand_call.execution_id)
            assert len(read(rt, lambda v: v.list_sessions())) == 3
            asked = [len(m.requests) for m in (parent_model, child_model, fetcher_model)]
            assert asked == [2, 2, 2] and looked_up == ["page"]
            if budget_s is not None:
                assert call.runs > 1 and grand_call.runs > 1  # re-executed at every level
            assert violations(rt) == []

    run(main())


def test_subagent_ids_stay_in_the_parents_namespace():
    assert child_session_id("alice/ops-1", "x0123") == "alice/sub-x0123"
    assert child_session_id("p1", "x0123") == "sub-x0123"
    assert child_request_id("x0123") == "subagent:x0123"


def test_bad_subagent_declarations_are_refused(tmp_path):
    child = researcher(fx.ScriptedModel([fx.reply("x")]))
    with pytest.raises(fx.ConfigurationError, match="needs a description"):
        fx.subagent(child, name="research", description="")
    with pytest.raises(fx.ConfigurationError, match="expected an Agent"):
        fx.subagent("researcher", name="research", description="d")  # type: ignore[arg-type]
    impostor = fx.Agent("researcher", fx.ScriptedModel([fx.reply("y")]))
    parent = lead(child, fx.ScriptedModel([fx.reply("z")]))
    with pytest.raises(fx.ConfigurationError, match="two different agents are named"):
        fx.Runtime([parent, impostor], store=fresh_store(tmp_path))


def test_a_subagent_run_outside_a_turn_says_so():
    tool = fx.subagent(researcher(fx.ScriptedModel([])), name="research", description="d")
    ctx = fx.ToolContext(execution_id="x1", session_id="s", tool_name="research", attempt=1)

    with pytest.raises(fx.SubagentError, match="only inside a durable turn"):
        run(tool.run(tool.parse('{"task": "t"}'), ctx))


# -- recovery: a parent that died with its subagent call running ----------------------------------


def slow_child_model() -> fx.ScriptedModel:
    """A child still working when its parent gives it up: its next round streams for about
    2 s (so the abort lands first) and asks for another lookup, so a boundary comes before
    any final answer (a final answer would be kept: finished work is not discarded)."""
    return fx.ScriptedModel(
        [
            fx.reply("unused"),
            fx.reply("still digging", fx.call("lookup", topic="b")),
            fx.reply("late"),
        ],
        chunk_size=1,
        delay_s=0.15,
    )


def crashed_parent(url: str, *, child_steps: bool, child_holder: WorkerIdentity | None = None):
    """A parent process that died inside its subagent call: the call is running, its child
    admitted; with ``child_steps`` the child (run inline by the same dead process) had
    recorded its first model round and that round's lookup. ``child_holder``: another worker
    holds the child's lease instead (live, for a minute)."""
    holder: list[Fence] = []

    def inside_the_call(journal: Journal, fence: Fence) -> None:
        [task] = journal.read(lambda v: v.session_tool_tasks("p1"))
        child = journal.admit_child(fence, task.id, agent="researcher", prompt="find it")
        child_id = child.submission.session_id
        lease = journal.read(lambda v: v.get_session("p1")).lease
        who = child_holder or WorkerIdentity(host=lease.host or "", pid=lease.pid or 0)
        child_fence = journal.claim(child_id, who, ttl_s=60)
        assert child_fence is not None
        holder.append(child_fence)
        if not child_steps:
            return
        sub_id = child.submission.id
        journal.begin_attempt(child_fence, sub_id, worker="dead")
        [lookup] = journal.record_model_call(
            child_fence,
            sub_id,
            round_=0,
            text="",
            tool_calls=[fx.call("lookup", topic="a")],
            policies=["safe"],
            usage=Usage(),
        ).tasks
        journal.start_tool(child_fence, lookup.id)
        journal.finish_tool(child_fence, lookup.id, ToolTaskStatus.COMPLETED, "a: 42")

    crashed = leave_crashed_turn(
        url,
        agent="lead",
        session_id="p1",
        calls=[fx.call("research", task="find it")],
        policies=["idempotent"],
        running=[0],
        after=inside_the_call,
    )
    return crashed, holder[0]


def test_recovery_reattaches_to_the_child_and_resumes_it_from_its_last_step(tmp_path):
    url = db_url(tmp_path)
    looked_up: list[str] = []
    lookup = recording_lookup(looked_up)

    child_model = fx.ScriptedModel([fx.reply("unused"), fx.reply("it is 42")])
    child = researcher(child_model, [lookup])
    parent_model = fx.ScriptedModel([fx.reply("unused"), fx.reply("42, says research")])
    parent = lead(child, parent_model)
    crashed, _ = crashed_parent(url, child_steps=True)

    async def main() -> None:
        async with fx.Runtime([parent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("p1").wait(crashed.submission.id, timeout=10)
            assert sub.result == "42, says research"
            [call] = tasks(rt, crashed.turn_id)
            assert (call.status, call.result, call.runs) == ("completed", "it is 42", 2)
            # The child resumed: its recorded round and lookup were not run again.
            assert looked_up == [] and len(child_model.requests) == 1
            child_id = call.child_session
            assert child_id is not None
            [child_sub] = read(rt, lambda v: v.submissions(child_id))
            assert (child_sub.interruptions, child_sub.result_text) == (1, "it is 42")
            assert len(read(rt, lambda v: v.list_sessions())) == 2
            await check_invariants(rt, "p1")
            await check_invariants(rt, child_id)
            assert violations(rt) == []

    run(main())


def test_a_call_waits_for_a_child_another_live_worker_holds_then_takes_it_over(tmp_path):
    url = db_url(tmp_path)
    child_model = fx.ScriptedModel([fx.reply("it is 42")])
    parent = lead(researcher(child_model), fx.ScriptedModel([fx.reply("unused"), fx.reply("done")]))
    elsewhere = WorkerIdentity(host="another-host", pid=4242)
    crashed, other = crashed_parent(url, child_steps=False, child_holder=elsewhere)

    async def main() -> None:
        async with fx.Runtime([parent], store=owned_store(url), settings=NO_SCAN) as rt:
            s = rt.session("p1")
            while tasks(rt, crashed.turn_id)[0].runs < 2:  # the call was re-executed
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # the call waits: the child's holder is alive
            assert len(child_model.requests) == 0
            assert not (await s.submission(crashed.submission.id)).settled
            await asyncio.to_thread(rt.journal.release, other)  # that worker is done
            sub = await s.wait(crashed.submission.id, timeout=10)
            assert sub.result == "done"
            [call] = tasks(rt, crashed.turn_id)
            assert call.result == "it is 42" and len(child_model.requests) == 1
            assert violations(rt) == []

    run(main())


def test_a_redeploy_without_the_subagent_fails_that_call_naming_the_child(tmp_path):
    url = db_url(tmp_path)
    # The start-up scan also wakes the child: it is still working when the abort comes.
    child = researcher(slow_child_model())
    parent_model = fx.ScriptedModel([fx.reply("unused"), fx.reply("I will do it myself")])
    redeployed = fx.Agent("lead", parent_model)  # no longer declares "research"
    crashed, _ = crashed_parent(url, child_steps=True)

    async def main() -> None:
        async with fx.Runtime([redeployed, child], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("p1", agent="lead").wait(crashed.submission.id, timeout=10)
            assert sub.result == "I will do it myself"
            [call] = tasks(rt, crashed.turn_id)
            assert call.status == "failed" and call.child_session is not None
            assert call.result == (
                f"subagent session {call.child_session} abandoned: the subagent 'research' "
                "is no longer declared by this agent"
            )
            # Nobody will read the child's answer: it was aborted, and settles so.
            child_s = rt.session(call.child_session, agent="researcher")
            [child_sub] = read(rt, lambda v: v.submissions(call.child_session or ""))
            assert (await child_s.wait(child_sub.id, timeout=10)).status == "aborted"
            await check_invariants(rt, "p1")
            await check_invariants(rt, call.child_session)
            assert violations(rt) == []

    run(main())


def test_a_parent_out_of_attempts_names_the_child_in_its_unknown_marker(tmp_path):
    url = db_url(tmp_path)
    child = researcher(slow_child_model())
    parent = fx.Agent(
        "lead",
        fx.ScriptedModel([fx.reply("unused")]),
        tools=[fx.subagent(child, name="research", description="Research.")],
        durability=fx.Durability(max_attempts=1),
    )
    crashed, _ = crashed_parent(url, child_steps=True)

    async def main() -> None:
        async with fx.Runtime([parent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("p1").wait(crashed.submission.id, timeout=10)
            assert sub.status == "failed" and sub.error is not None
            [call] = tasks(rt, crashed.turn_id)
            assert call.status == "outcome_unknown"
            assert sub.error.code == "attempts_exhausted"
            assert sub.error.unknown_calls == (
                f"research ({call.id}; child session {call.child_session})",
            )
            [child_sub] = read(rt, lambda v: v.submissions(call.child_session or ""))
            child_s = rt.session(call.child_session or "", agent="researcher")
            assert (await child_s.wait(child_sub.id, timeout=10)).status == "aborted"
            assert violations(rt) == []

    run(main())


def test_the_invariant_checker_audits_subagent_links_and_results(tmp_path):
    """``fxdurable check`` audits subagents: each tampering below is reported."""
    child = researcher(fx.ScriptedModel([fx.reply("it is 42")]))
    parent = lead(
        child,
        fx.ScriptedModel(
            lambda request: (
                fx.reply("", fx.call("research", task=request.messages[-1].text))
                if request.messages[-1].role == "user"
                else fx.reply("done")
            )
        ),
    )
    store = fresh_store(tmp_path)

    async def main() -> None:
        async with fx.Runtime([parent], store=store, settings=FAST) as rt:
            for prompt in ("one", "two", "three"):
                await rt.session("p1").run(prompt, timeout=10)
            assert violations(rt) == []

    run(main())
    store = fresh_store(tmp_path)
    one, two, three = store.read(lambda v: v.session_tool_tasks("p1"))

    def tamper(tx):  # type: ignore[no-untyped-def]
        # one: its child no longer named by the call (an orphan child, a result unchecked)
        tx.put_tool_task(
            replace(one, child_session=None, version=one.version + 1), expected_version=one.version
        )
        # two: a result that is not the child's answer
        tx.put_tool_task(
            replace(two, result="made up", version=two.version + 1), expected_version=two.version
        )

    store.transact(tamper)
    # three: a second submission on its child
    Journal(store, SystemClock(), RandomIds()).admit(
        three.child_session, agent="researcher", prompt="again"
    )
    found = store.read(lambda v: check_store(v, now=time.time())).violations
    assert {(v.code, v.session_id) for v in found} == {
        ("subagent-orphan", one.child_session),
        ("subagent-result", "p1"),
        ("subagent-submissions", "p1"),
    }


def test_aborting_the_parent_aborts_the_child_it_runs(tmp_path):
    started = threading.Event()

    @fx.tool
    async def lookup(inp: Lookup, ctx: fx.ToolContext) -> str:
        "Look a topic up, slowly."
        started.set()
        await asyncio.sleep(30)
        return "too late"

    child = researcher(
        fx.ScriptedModel([fx.reply("", fx.call("lookup", topic="a")), fx.reply("never")]),
        [lookup],
    )
    parent = lead(child, fx.ScriptedModel([fx.reply("", fx.call("research", task="dig"))]))

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("p1")
            sub = await s.submit("go")
            while not started.is_set():
                await asyncio.sleep(0.01)
            await s.abort()
            assert (await s.wait(sub.id, timeout=10)).status == "aborted"
            [call] = tasks(rt, sub.id)
            assert call.status == "outcome_unknown" and call.child_session is not None
            child_s = rt.session(call.child_session, agent="researcher")
            [child_sub] = read(rt, lambda v: v.submissions(call.child_session or ""))
            assert child_sub.abort_requested
            # Its lease, kept by the cancelled run, expires (2 s here); then it settles aborted.
            assert (await child_s.wait(child_sub.id, timeout=10)).status == "aborted"
            [child_call] = tasks(rt, child_sub.id)
            assert child_call.status == "cancelled"
            assert violations(rt) == []

    run(main(), timeout=30)


def test_a_child_bound_to_another_agent_after_a_redeploy_fails_the_call_naming_it(tmp_path):
    """The subagent now delegates to an agent of another name: the call re-executed after a
    crash cannot reattach to its child, and fails naming it."""
    url = db_url(tmp_path)
    renamed = fx.Agent("analyst", fx.ScriptedModel([fx.reply("never asked")]))
    parent = lead(renamed, fx.ScriptedModel([fx.reply("unused"), fx.reply("moving on")]))
    crashed, _ = crashed_parent(url, child_steps=True)

    async def main() -> None:
        async with fx.Runtime([parent], store=owned_store(url), settings=NO_SCAN) as rt:
            sub = await rt.session("p1", agent="lead").wait(crashed.submission.id, timeout=10)
            assert sub.result == "moving on"
            [call] = tasks(rt, crashed.turn_id)
            assert call.status == "failed" and call.child_session is not None
            assert call.result == (
                f"AgentMismatchError: session {call.child_session!r} belongs to agent "
                "'researcher', not 'analyst'; a session stays bound to the agent that created "
                "it: start a new session for this agent"
            )

    run(main())


def test_a_child_that_asks_a_person_holds_the_call_until_answered_without_running(tmp_path):
    """The child's hook asks before its lookup: the parent's call waits, reading only the
    child's submission (the child's session is not claimed, so its version stays put), and
    goes on once the child is answered."""
    looked_up: list[str] = []

    def ask_first(tool: str, arguments: str) -> fx.Ask | None:
        return fx.ask(f"May I {tool}?") if tool == "lookup" else None

    child = fx.Agent(
        "researcher",
        fx.ScriptedModel([fx.reply("", fx.call("lookup", topic="a")), fx.reply("a is 42")]),
        tools=[recording_lookup(looked_up)],
        before_tool=ask_first,
    )
    parent = lead(
        child, fx.ScriptedModel([fx.reply("", fx.call("research", task="a?")), fx.reply("42")])
    )

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("p1")
            sub = await s.submit("go")
            while (running := await s.running_task()) is None or running.child_session is None:
                await asyncio.sleep(0.01)
            child_s = rt.session(running.child_session, agent="researcher")
            while (question := await child_s.question()) is None:
                await asyncio.sleep(0.01)
            assert question.question == "May I lookup?"
            child_id = running.child_session

            def child_session() -> SessionRecord:
                record = read(rt, lambda v: v.get_session(child_id))
                assert record is not None
                return record

            def child_version() -> int:
                return child_session().version

            while child_session().lease.owner is not None:  # the run that asked lets go
                await asyncio.sleep(0.01)
            version = child_version()
            await asyncio.sleep(0.5)  # ten polls of the call
            assert child_version() == version  # never claimed while it waits
            assert not (await s.submission(sub.id)).settled and looked_up == []
            await child_s.answer(fx.allow())
            assert (await s.wait(sub.id, timeout=10)).result == "42"
            assert looked_up == ["a"]
            assert violations(rt) == []

    run(main(), timeout=30)


# -- two children of one response: a parallel batch ------------------------------------------


def metered_researcher(meter: Meter, *, steps: int = 1) -> fx.Agent:
    """A researcher that answers ``<topic> is 42`` after ``steps`` lookups of its topic, each
    a visit to ``meter`` (held until both children's lookups are in flight)."""

    @fx.tool
    async def lookup(inp: Lookup, ctx: fx.ToolContext) -> str:
        "Look a topic up."
        return await meter.visit(inp.topic)

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        topic = last_user_text(request)
        if rounds_done(request) < steps:
            return fx.reply("", fx.call("lookup", topic=topic))
        return fx.reply(f"{topic} is 42")

    return researcher(fx.ScriptedModel(policy), [lookup])


def submissions_of(rt: fx.Runtime, session_id: str) -> list[SubmissionRecord]:
    return read(rt, lambda v: v.submissions(session_id))


def two_children_lead(child: fx.Agent) -> tuple[fx.Agent, fx.ScriptedModel]:
    model = fx.ScriptedModel(
        [fx.reply("", fx.call("research", task="a"), fx.call("research", task="b")), fx.reply("ok")]
    )
    return lead(child, model), model


def test_two_subagent_calls_of_one_response_run_their_children_together(tmp_path):
    """Both children run at once, each inline in this process (their tools are in flight
    together); the second finishes first, and the parent's model reads the answers in the
    order it asked."""
    meter = Meter(2, finish_after={"a": 0.05})
    parent, model = two_children_lead(metered_researcher(meter))

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            assert await rt.session("p1").run("go", timeout=20) == "ok"
            [sub] = read(rt, lambda v: v.submissions("p1"))
            calls = tasks(rt, sub.id)
            assert [(c.status, c.result) for c in calls] == [
                ("completed", "a is 42"),
                ("completed", "b is 42"),
            ]
            for call in calls:
                assert call.child_session is not None
                assert len(submissions_of(rt, call.child_session)) == 1
                await check_invariants(rt, call.child_session)
            await check_invariants(rt, "p1")
            assert violations(rt) == []

    run(main())
    assert meter.peak == 2
    assert meter.left == ["b", "a"]
    assert [m.text for m in tool_messages(model.requests[-1])] == ["a is 42", "b is 42"]


def test_a_parent_at_its_deadline_with_two_children_in_flight_resumes_both(tmp_path):
    """Invocations of one step: both calls suspend with their children unsettled, and every
    next attempt re-executes both, which go on from their children's last recorded steps."""
    meter = Meter(1)  # no waiting for company: the children's steps interleave as they may
    parent, model = two_children_lead(metered_researcher(meter, steps=2))

    async def main() -> None:
        async with fx.Runtime(
            [parent], store=fresh_store(tmp_path), settings=FAST, invocation_budget_s=0.0001
        ) as rt:
            assert await rt.session("p1").run("go", timeout=20) == "ok"
            [sub] = read(rt, lambda v: v.submissions("p1"))
            calls = tasks(rt, sub.id)
            assert [c.result for c in calls] == ["a is 42", "b is 42"]
            assert all(c.runs > 1 for c in calls)  # re-executed, never left unknown
            for call in calls:
                child = call.child_session or ""
                assert len(submissions_of(rt, child)) == 1
                await check_invariants(rt, child)
            await check_invariants(rt, "p1")
            assert violations(rt) == []

    run(main(), timeout=30)
    # Each child's steps ran once: two lookups each, however often the parent suspended.
    assert sorted(meter.entered) == ["a", "a", "b", "b"]
    assert [m.text for m in tool_messages(model.requests[-1])] == ["a is 42", "b is 42"]


def test_aborting_the_parent_aborts_both_children_it_runs(tmp_path):
    entered: list[str] = []

    @fx.tool
    async def lookup(inp: Lookup, ctx: fx.ToolContext) -> str:
        "Look a topic up, slowly."
        entered.append(inp.topic)
        await asyncio.sleep(30)
        return "too late"

    child = researcher(
        fx.ScriptedModel(lambda r: fx.reply("", fx.call("lookup", topic=last_user_text(r)))),
        [lookup],
    )
    parent, _ = two_children_lead(child)

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
            s = rt.session("p1")
            sub = await s.submit("go")
            while len(entered) < 2:  # both children are in their tool
                await asyncio.sleep(0.01)
            await s.abort()
            assert (await s.wait(sub.id, timeout=10)).status == "aborted"
            calls = tasks(rt, sub.id)
            assert [c.status for c in calls] == ["outcome_unknown", "outcome_unknown"]
            for call in calls:
                child_id = call.child_session or ""
                [child_sub] = submissions_of(rt, child_id)
                assert child_sub.abort_requested
                # Its lease, kept by the cancelled run, expires (2 s); then it settles aborted.
                child_s = rt.session(child_id, agent="researcher")
                assert (await child_s.wait(child_sub.id, timeout=10)).status == "aborted"
                [child_call] = tasks(rt, child_sub.id)
                assert child_call.status == "cancelled"
            assert violations(rt) == []

    run(main(), timeout=30)
    assert sorted(entered) == ["a", "b"]
