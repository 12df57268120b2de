"""The replies of ``GET /agents`` and ``GET /sessions/{id}/calls``
(:mod:`fxdurable.http.tool_routes`), as the OpenAPI document publishes them."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from fxdurable.http.schemas import _Body

__all__ = ["AgentTools", "AgentsReply", "CallsReply", "ToolCallOut", "ToolOut"]


class ToolOut(_Body):
    name: str
    kind: str | None = Field(
        description="read, diff, terminal, todo, plan or subagent: how a console renders its "
        "calls (fxdurable.runtime.tool_kinds); null for a generic card"
    )


class AgentTools(_Body):
    name: str
    tools: list[ToolOut]


class AgentsReply(_Body):
    """Every agent served, and the agents their subagent tools run."""

    agents: list[AgentTools]


class ToolCallOut(_Body):
    task: str
    tool: str
    kind: str | None
    turn_id: str
    round: int
    index: int
    status: str = Field(
        description="pending, running, waiting, completed, failed, cancelled, "
        "outcome_unknown or refused"
    )
    runs: int = Field(description="executions started (2 or more: re-executed after a crash)")
    arguments: dict[str, Any] = Field(description="the call's input ({} when not a JSON object)")
    result: str | None = Field(description="what the model read for it, once settled")
    child_session: str | None = Field(description="a subagent call's child session")


class CallsReply(_Body):
    session_id: str
    calls: list[ToolCallOut]
