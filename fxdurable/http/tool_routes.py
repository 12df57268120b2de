"""The routes a console renders tool calls from: ``GET /agents`` (each agent's tools and their
kinds) and ``GET /sessions/{id}/calls`` (each call of a session with its input and result).

The chat stream's lines name a call (``task``, ``tool``) but carry neither its arguments (they
may be large, or secret to anyone but the session's owner) nor its tool's kind; a console
reads both here, once per call, and renders it by kind (:mod:`fxdurable.runtime.tool_kinds`).
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from fxdurable.core.records import ToolTaskRecord
from fxdurable.http.route_base import RouteBase, json_reply, session_id_param
from fxdurable.http.scoping import public_session_id
from fxdurable.http.tool_schemas import AgentsReply, AgentTools, CallsReply, ToolCallOut, ToolOut
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.subagent import SubagentTool
from fxdurable.runtime.tool_kinds import kind_of

__all__ = ["ToolRoutes", "agents_reply", "call_reply"]


class ToolRoutes(RouteBase):
    async def agents(self, request: Request) -> Response:
        """Every agent served (and each subagent's), with its tools' names and kinds."""
        await self.principal(request)
        return json_reply(agents_reply(list(self._rt.agents.values())))

    async def calls(self, request: Request) -> Response:
        """The session's tool calls as the store lists them (the order they were asked, on
        SQLite), with their input and, once settled, their result."""
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        session = await self._owned(principal, public)
        tasks = await durable(self._rt.journal.read, lambda v: v.session_tool_tasks(session.id))
        kinds = _kinds_by_tool(list(self._rt.agents.values()))
        calls = [call_reply(t, kinds.get(t.tool)) for t in tasks]
        return json_reply(CallsReply(session_id=public, calls=calls))


def _all_agents(agents: list[Agent]) -> list[Agent]:
    """``agents`` and, depth first, the agents their subagent tools run (each once)."""
    seen: dict[str, Agent] = {}
    pending = list(agents)
    while pending:
        agent = pending.pop(0)
        if agent.name in seen:
            continue
        seen[agent.name] = agent
        pending.extend(t.agent for t in agent.tools if isinstance(t, SubagentTool))
    return list(seen.values())


def agents_reply(agents: list[Agent]) -> AgentsReply:
    return AgentsReply(
        agents=[
            AgentTools(
                name=agent.name,
                tools=[ToolOut(name=t.name, kind=kind_of(t)) for t in agent.tools],
            )
            for agent in _all_agents(agents)
        ]
    )


def _kinds_by_tool(agents: list[Agent]) -> dict[str, str | None]:
    """Tool name -> kind over every agent (a name two agents give different kinds keeps the
    first's: the calls route cannot tell which agent's it was)."""
    kinds: dict[str, str | None] = {}
    for agent in _all_agents(agents):
        for t in agent.tools:
            kinds.setdefault(t.name, kind_of(t))
    return kinds


def call_reply(task: ToolTaskRecord, kind: str | None) -> ToolCallOut:
    try:
        arguments = json.loads(task.arguments)
    except ValueError:
        arguments = None
    child = task.child_session
    return ToolCallOut(
        task=task.id,
        tool=task.tool,
        kind=kind,
        turn_id=task.turn_id,
        round=task.round,
        index=task.index,
        status=task.status.value,
        runs=task.runs,
        arguments=arguments if isinstance(arguments, dict) else {},
        result=task.result,
        child_session=None if child is None else public_session_id(child),
    )
