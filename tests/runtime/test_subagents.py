"""Subagents (``fx.subagent``): a tool that runs a child durable session and returns its answer.

The child's session and submission ids derive from the call's execution id, so a re-executed
call reattaches; the call drives the child inline within the parent's budgets; a viewer of the
parent sees the child's streamed text in the call's progress; failures name the child.
"""

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
    events,
    fresh_store,
    read,
    run,
    submission,
    tasks,
)

import fxdurable as fx
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


def violations(rt: fx.Runtime) -> list[str]:
    summary = read(rt, lambda v: check_store(v, now=time.time(), at_rest=True))
    return [str(v) for v in summary.violations]


def test_a_subagent_call_returns_the_childs_answer_and_links_both_sessions(tmp_path):
    looked_up: list[str] = []

    @fx.tool
    def lookup(inp: Lookup, ctx: fx.ToolContext) -> str:
        "Look a topic up."
        looked_up.append(inp.topic)
        return f"{inp.topic}: 42"

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

    async def main() -> None:
        async with fx.Runtime([parent], store=fresh_store(tmp_path), settings=FAST) as rt:
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
            assert (child_sub.prompt, child_sub.result_text) == ("find the answer", "the answer is 42")
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

    run(main())
