"""Subagents: ``fx.subagent(agent, name=..., description=...)`` is a tool that hands a task to
a child durable session of ``agent`` and returns the child's final answer.

- **One child per call.** The child's session id and its one submission's request id derive
  from the call's ``execution_id`` (:mod:`fxdurable.core.subagent`): however often the
  parent's process dies, there is one child session and one child submission. The child
  records its parent (``SessionRecord.parent_session``/``parent_task``, and its
  ``session.created`` event); the call records its child (``ToolTaskRecord.child_session``);
  both are written in the transaction that admits the child.
- **Run inline, never waited on blindly.** The call drives the child's turn itself, in the
  same process, within the parent's deadline and time budget
  (:mod:`fxdurable.runtime.children`); a child another live worker is running is waited for.
  Recovery of the parent re-executes the call (replay policy ``idempotent``), which reattaches
  to the child and resumes it from its last recorded step, never ``outcome_unknown``; the
  same holds for grandchildren, since the child's own subagent calls are recovered by the
  child's turn.
- **Progress.** While the child runs here, its model's streamed text and its tools' progress
  reports go to the call's ``progress`` (:mod:`fxdurable.runtime.relay`).
- **Failures.** A child that settles failed or aborted fails the call with a
  :class:`~fxdurable.errors.SubagentError` naming the child session (the parent's model reads
  it). A redeploy that no longer declares the subagent settles its interrupted call failed,
  naming the child, and the parent goes on. A parent that fails for good with the call in
  flight names the child in its unknown-call marker and records an abort on the child.
- **Registration.** The child's agent runs on the parent's workers: :func:`with_delegates`
  adds every subagent's agent (recursively) to a runtime's or a worker's agents.
"""

from __future__ import annotations

from collections.abc import Iterable

import pydantic

from fxdurable.errors import ConfigurationError, SubagentError
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.relay import relaying_to
from fxdurable.runtime.tools import Tool, ToolContext

__all__ = ["SubagentInput", "SubagentTool", "subagent", "with_delegates"]


class SubagentInput(pydantic.BaseModel):
    """What the parent's model sends: the task, written for someone who knows nothing else."""

    task: str = pydantic.Field(min_length=1, description="the task, self-contained")


class SubagentTool(Tool):
    """A :class:`Tool` whose calls run ``agent`` in a child session."""

    __slots__ = ("agent",)
    agent: Agent

    def __init__(self, agent: Agent, *, name: str, description: str, timeout_s: float) -> None:
        async def delegate(arguments: SubagentInput, ctx: ToolContext) -> str:
            children = ctx.children
            if children is None:
                raise SubagentError(
                    f"{name}: a subagent runs only inside a durable turn (a Runtime or a worker)"
                )
            with relaying_to(ctx.progress):
                return await children.run(agent.name, arguments.task)

        super().__init__(
            name=name,
            description=description,
            input_model=SubagentInput,
            execute=delegate,
            # Re-executing a call reattaches to the same child (the ids derive from the
            # execution id): it is idempotent, so recovery and parallel batches may run it.
            replay="idempotent",
            timeout_s=timeout_s,
        )
        object.__setattr__(self, "agent", agent)


def subagent(
    agent: Agent, *, name: str, description: str, timeout_s: float = 3600.0
) -> SubagentTool:
    """A tool that submits ``{"task": ...}`` to a child session of ``agent`` and returns its
    final answer. ``description`` tells the parent's model when to delegate. ``timeout_s``
    bounds the call in one invocation (the parent's own budgets bound it too)."""
    if not isinstance(agent, Agent):
        raise ConfigurationError(f"subagent {name!r}: expected an Agent, not {agent!r}")
    if not description:
        raise ConfigurationError(f"subagent {name!r}: the parent's model needs a description")
    return SubagentTool(agent, name=name, description=description, timeout_s=timeout_s)


def with_delegates(agents: Iterable[Agent]) -> list[Agent]:
    """``agents`` and, recursively, every agent their subagent tools delegate to (each once).
    Two different agents under one name raise :class:`ConfigurationError`: a session is
    bound to its agent by name."""
    found: dict[str, Agent] = {}
    todo = list(agents)
    while todo:
        agent = todo.pop(0)
        known = found.get(agent.name)
        if known is agent:
            continue
        if known is not None:
            raise ConfigurationError(
                f"two different agents are named {agent.name!r} (one is a subagent's); "
                "sessions are bound to agents by name: rename one"
            )
        found[agent.name] = agent
        todo.extend(t.agent for t in agent.tools if isinstance(t, SubagentTool))
    return list(found.values())
