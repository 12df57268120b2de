"""``DurableMiddleware`` in process: the user's own ``create_agent`` graph (their middleware
included) runs as the turn, each model and tool call journaled; a turn cut short is replayed
from the journal by position, and a graph that asks for another call than the recorded one
fails with ``ReplayMismatchError``. ``build_graph`` is the crash matrix's agent in this form
(``test_langchain_agent.world_parts``: the same model, tools and outside world), which
``test_langchain_middleware_crash.py`` kills.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool

import fxdurable as fx
from fxdurable.adapters.langchain import DurableMiddleware, with_replay
from tests.adapters.test_langchain_agent import (
    ToolCallingFakeChatModel,
    call,
    turn_returns,
    world_parts,
)
from tests.runtime.fxrt_support import check_invariants, leave_crashed_turn, owned_store

FAST = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)

UNKNOWN = "may or may not have completed"


class Counting(AgentMiddleware):
    """A user's own middleware, inside ours: it sees each model call made, not replayed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.before = 0

    def before_model(self, state: Any, runtime: Any) -> None:
        self.before += 1  # a graph node: runs on every attempt, replayed calls too

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        self.calls += 1
        return await handler(request)


def build_graph(world: Path, durability: fx.Durability | None = None) -> fx.Agent:
    model, tools = world_parts(world)
    durable = DurableMiddleware(replay={"record_note": "idempotent"})
    graph = create_agent(
        model, tools, middleware=[durable], system_prompt="You deploy releases carefully."
    )
    return durable.agent(graph, name="lc-ops", durability=durability)


build = build_graph  # what tests/adapters/frameworks.py builds for "langchain-graph"


def test_the_graph_runs_its_own_middleware_and_every_call_is_journaled(tmp_path: Path) -> None:
    effects: list[str] = []

    def answer(messages: list[BaseMessage]) -> AIMessage:
        returns = turn_returns(messages)
        if not returns:
            return call("read_status", region="eu")
        if len(returns) == 1:
            return call("deploy", release="r1")
        return AIMessage(content=f"done: {returns[-1].content}")

    @tool
    def read_status(region: str) -> str:
        """Read a region's status."""
        return f"{region}: healthy"

    @tool
    def deploy(release: str) -> str:
        """Deploy a release."""
        effects.append(release)
        return f"{release} deployed"

    counting = Counting()
    durable = DurableMiddleware()
    graph = create_agent(
        ToolCallingFakeChatModel(respond=answer),
        [with_replay(read_status, "safe"), deploy],
        middleware=[durable, counting],
    )
    agent = durable.agent(graph, name="ops", durability=fx.Durability(partial_text_every_s=0.0))
    assert {t.name: t.policy for t in agent.tools} == {"read_status": "safe", "deploy": "unsafe"}

    async def main() -> tuple[str, str, list[fx.EventRecord]]:
        async with fx.Runtime([agent], store=f"sqlite:///{tmp_path}/s.db") as rt:
            session = rt.session("ops-1")
            first = await session.run("Deploy r1.")
            second = await session.run("Deploy r1 again.")  # the graph's input: the journal's
            return first, second, await session.events()

    first, second, events = asyncio.run(main())
    assert first == "done: r1 deployed" and second == "done: r1 deployed"
    assert effects == ["r1", "r1"]
    assert (counting.calls, counting.before) == (6, 6)  # 3 model calls per turn, all made
    kinds = [e.type for e in events]
    assert kinds.count("tool.started") == 4 and kinds.count("tool.completed") == 4, kinds
    assert kinds.count("model.completed") == 6, kinds
    # The model's streamed reply reached the event log (and so the HTTP line stream).
    partials = "".join(e.data["text"] for e in events if e.type == "model.partial")
    assert "done: r1 deployed" in partials, partials


def test_a_recovered_turn_replays_recorded_calls_and_settles_the_cut_one(tmp_path: Path) -> None:
    # What a worker SIGKILLed mid-deploy leaves: model call 0 recorded asking for a read and
    # the deploy, the read's result recorded, the deploy's intent committed (running).
    url = f"sqlite:///{tmp_path}/s.db"
    calls = [
        fx.ToolCallRequest(name="read_status", arguments='{"region":"eu"}', provider_id="c1"),
        fx.ToolCallRequest(name="deploy", arguments='{"release":"r1"}', provider_id="c2"),
    ]
    crashed = leave_crashed_turn(
        url,
        agent="ops",
        session_id="ops-2",
        prompt="Deploy r1.",
        calls=calls,
        policies=["safe", "unsafe"],
        completed={0: "eu: healthy"},
        running=[1],
    )
    asked: list[list[str]] = []
    ran: list[str] = []

    def answer(messages: list[BaseMessage]) -> AIMessage:
        returns = turn_returns(messages)
        asked.append([str(r.content) for r in returns])
        if UNKNOWN in str(returns[-1].content) and len(returns) == 2:
            return call("deploy", release="r1")  # a blind repeat: refused
        return AIMessage(content="deploy outcome unknown; not repeated")

    @tool
    def read_status(region: str) -> str:
        """Read a region's status."""
        ran.append("read_status")
        return f"{region}: healthy"

    @tool
    def deploy(release: str) -> str:
        """Deploy a release."""
        ran.append("deploy")
        return f"{release} deployed"

    counting = Counting()
    durable = DurableMiddleware()
    graph = create_agent(
        ToolCallingFakeChatModel(respond=answer),
        [with_replay(read_status, "safe"), deploy],
        middleware=[durable, counting],
    )

    async def main() -> tuple[fx.Submission, list[fx.EventRecord]]:
        agent = durable.agent(graph, name="ops")
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            session = rt.session("ops-2")
            done = await session.wait(crashed.submission.id, timeout=20)
            await check_invariants(rt, "ops-2")
            return done, await session.events()

    done, events = asyncio.run(main())
    assert done.status == "completed", done
    assert done.result == "deploy outcome unknown; not repeated"
    assert ran == []  # the recorded read replayed, the cut deploy unknown, its repeat refused
    # Model call 0 was answered from the journal: the graph's own middleware never saw it.
    assert counting.calls == 2 and counting.before == 3
    assert asked[0] == ["eu: healthy", asked[0][1]] and UNKNOWN in asked[0][1]
    assert UNKNOWN in asked[1][2]  # the refusal of the blind repeat says the same
    kinds = [e.type for e in events]
    assert kinds.count("tool.outcome_unknown") == 1 and kinds.count("tool.refused") == 1


def test_a_graph_that_asks_for_another_call_than_recorded_fails_the_turn(tmp_path: Path) -> None:
    # A middleware listed before DurableMiddleware (outside it) rewrites each call's
    # arguments: the call the tool node makes is not the one the model's reply recorded.
    class Rewriting(AgentMiddleware):
        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            changed = {**request.tool_call, "args": {"release": "r2"}}
            return await handler(request.override(tool_call=changed))

    ran: list[str] = []

    @tool
    def deploy(release: str) -> str:
        """Deploy a release."""
        ran.append(release)
        return f"{release} deployed"

    durable = DurableMiddleware()
    graph = create_agent(
        ToolCallingFakeChatModel(respond=lambda m: call("deploy", release="r1")),
        [deploy],
        middleware=[Rewriting(), durable],
    )

    async def main() -> fx.Submission:
        async with fx.Runtime(
            [durable.agent(graph, name="ops")], store=f"sqlite:///{tmp_path}/s.db"
        ) as rt:
            session = rt.session("ops-3")
            sub = await session.submit("Deploy r1.")
            return await session.wait(sub.id)

    done = asyncio.run(main())
    assert ran == []
    assert done.status == "failed" and done.error is not None, done
    assert "ReplayMismatchError" in done.error.message, done.error
    assert 'recorded deploy({"release":"r1"})' in done.error.message, done.error


def test_outside_a_turn_the_graph_runs_plainly_and_a_checkpointer_is_refused() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    def deploy(release: str) -> str:
        """Deploy a release."""
        return f"{release} deployed"

    def answer(messages: list[BaseMessage]) -> AIMessage:
        returns = turn_returns(messages)
        return (
            AIMessage(content=f"done: {returns[-1].content}")
            if returns
            else call("deploy", release="r1")
        )

    durable = DurableMiddleware()
    graph = create_agent(ToolCallingFakeChatModel(respond=answer), [deploy], middleware=[durable])
    # Invoked directly (no fxdurable turn), the middleware lets each call through.
    state = asyncio.run(graph.ainvoke({"messages": [("user", "Deploy r1.")]}))
    assert state["messages"][-1].content == "done: r1 deployed"
    saved = DurableMiddleware()
    kept = create_agent(
        ToolCallingFakeChatModel(respond=answer),
        [deploy],
        middleware=[saved],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(fx.ConfigurationError, match="checkpointer"):
        saved.agent(kept, name="kept")
    with pytest.raises(fx.ConfigurationError, match="lacks"):
        DurableMiddleware(replay={"nope": "safe"}).agent(
            create_agent(ToolCallingFakeChatModel(respond=answer), [deploy]), name="x"
        )
