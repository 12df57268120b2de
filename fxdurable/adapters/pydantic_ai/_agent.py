"""A pydantic-ai ``Agent`` as an fxdurable :class:`~fxdurable.runtime.agent.Agent`.

The harness-adapter mapping (what fx-durable did for its host): a session is a durable agent's
session, a turn is a submission, each model request is a model step of fxdurable's turn
driver, each pydantic-ai tool call is an fxdurable tool task with a replay policy, and the
conversation pydantic-ai's model reads is rebuilt from the journal on every request. So a
SIGKILL anywhere resumes at the last recorded step, an interrupted ``unsafe`` tool is
``outcome_unknown`` and its first blind repeat refused, exactly as for fxdurable's own agents:
it *is* fxdurable's loop, fed by pydantic-ai's model and tools.

What is taken from the pydantic-ai agent, through its public API only: its model
(``Agent.model``, through ``pydantic_ai.direct``), its toolsets (``Agent.toolsets``: each
tool's definition, argument validator and function, called with ``AbstractToolset.call_tool``
and a ``RunContext``). What is not run: pydantic-ai's own run loop (``Agent.run`` and its
graph), so its capabilities and hooks, output types and validators, history processors and
usage limits do not apply; :func:`durable_agent` refuses an agent whose output type needs
them rather than dropping them quietly. Approval tools (``requires_approval=True``) and
external tools (``ExternalToolset``) become fxdurable questions (a ``before_tool`` that asks):
an approval's answer lets the call run, an external call's answer is its result
(:mod:`._external`), so a run never ends with ``DeferredToolRequests``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic_ai import Agent as PydanticAIAgent
from pydantic_ai import DeferredToolRequests, RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.models import Model as PydanticAIModel
from pydantic_ai.models import infer_model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, CombinedToolset, ToolsetTool
from pydantic_ai.usage import RunUsage

from fxdurable.adapters._fx_tools import added_tools, shown
from fxdurable.adapters.pydantic_ai._arguments import DefinedTool, ToolArguments
from fxdurable.adapters.pydantic_ai._external import ExternalTool
from fxdurable.adapters.pydantic_ai._model import FrameworkModel
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent import Agent, Durability
from fxdurable.runtime.hooks import Ask, ask
from fxdurable.runtime.tools import REPLAY_POLICIES, ReplayPolicy, Tool, ToolContext

__all__ = [
    "CONTEXT_KEY",
    "REPLAY_KEY",
    "FrameworkTool",
    "ToolArguments",
    "durable_agent",
    "replay",
    "tool_context",
]

# The tool metadata key a replay policy is read from (``replay(...)`` writes it), and the
# ``RunContext.metadata`` key under which a tool finds its fxdurable ToolContext.
REPLAY_KEY = "fxdurable_replay"
CONTEXT_KEY = "fxdurable"
# A side-effecting tool nobody classified: never re-run blindly (DESIGN §3.5).
DEFAULT_POLICY: ReplayPolicy = "unsafe"

T = TypeVar("T")
# What pydantic-ai's FunctionToolset raises (as a ModelRetry) when a tool's timeout expires.
_TIMED_OUT = re.compile(r"Timed out after [0-9.]+ seconds\.")


def replay(policy: ReplayPolicy) -> dict[str, Any]:
    """Tool metadata that gives a pydantic-ai tool its replay policy:
    ``@agent.tool_plain(metadata=replay("safe"))`` for a read-only tool, ``"idempotent"`` for
    one that deduplicates on its execution id. Tools without it are ``unsafe``."""
    if policy not in REPLAY_POLICIES:
        raise ConfigurationError(
            f"replay policy must be one of {', '.join(map(repr, REPLAY_POLICIES))}, not {policy!r}"
        )
    return {REPLAY_KEY: policy}


def tool_context(ctx: RunContext[Any]) -> ToolContext:
    """The fxdurable :class:`~fxdurable.runtime.tools.ToolContext` of a pydantic-ai tool's
    call (its ``execution_id``, ``progress``, ``state``, ``lease``), from the tool's
    ``RunContext``; raises :class:`ConfigurationError` when the tool runs outside fxdurable."""
    found = (ctx.metadata or {}).get(CONTEXT_KEY)
    if not isinstance(found, ToolContext):
        raise ConfigurationError(
            f"{ctx.tool_name or 'this tool'} runs outside an fxdurable turn: tool_context() "
            "needs the agent built by fxdurable.adapters.pydantic_ai.durable_agent"
        )
    return found


class FrameworkTool(DefinedTool):
    """A pydantic-ai tool as an fxdurable :class:`Tool`: validated by pydantic-ai's argument
    validator, run by its toolset's ``call_tool``, recorded and replayed by fxdurable."""

    __slots__ = ("approval",)
    approval: bool  # pydantic-ai's requires_approval: a person allows each call first

    def __init__(
        self,
        found: ToolsetTool[Any],
        *,
        toolset: AbstractToolset[Any],
        model: PydanticAIModel,
        deps: object,
        policy: ReplayPolicy,
    ) -> None:
        tool_def = found.tool_def
        approval = tool_def.kind == "unapproved"

        async def execute(arguments: ToolArguments, ctx: ToolContext) -> Any:
            run = RunContext(
                deps=deps,
                model=model,
                usage=RunUsage(),
                tool_name=tool_def.name,
                # What a pydantic-ai tool already reads as its call's id: here fxdurable's
                # execution id, the same on every retry of this call, across crashes.
                tool_call_id=ctx.execution_id,
                run_step=ctx.round,
                # An approval tool runs only once a person allowed it (its before_tool asks).
                tool_call_approved=approval,
                metadata={CONTEXT_KEY: ctx},
            )
            try:
                async with toolset:
                    return await toolset.call_tool(tool_def.name, arguments.values, run, found)
            except ModelRetry as exc:
                if _TIMED_OUT.fullmatch(exc.message) is None:
                    raise
                # pydantic-ai's own tool timeout (per tool or per toolset), which it reports
                # as "retry": for fxdurable it is a call cut short, settled by its policy (an
                # unsafe one is outcome_unknown, never a failure the model may just retry).
                raise TimeoutError(f"{tool_def.name} {exc.message}") from exc

        super().__init__(
            name=tool_def.name,
            description=tool_def.description or tool_def.name,
            input_model=ToolArguments,
            execute=execute,
            replay=policy,
            timeout_s=tool_def.timeout if tool_def.timeout is not None else 300.0,
        )
        object.__setattr__(self, "definition", found)
        object.__setattr__(self, "approval", approval)


def durable_agent(
    agent: PydanticAIAgent[Any, Any],
    *,
    name: str | None = None,
    instructions: str = "",
    deps: object = None,
    replay: Mapping[str, ReplayPolicy] | None = None,
    tools: Sequence[Tool] = (),
    model_settings: ModelSettings | None = None,
    stream: bool = True,
    durability: Durability | None = None,
) -> Agent:
    """An fxdurable :class:`Agent` that runs ``agent``'s model and tools durably.

    ``name`` (default: the pydantic-ai agent's) binds sessions to it. ``instructions`` are the
    system instructions (pydantic-ai has no public accessor for an agent's own). ``deps`` is
    what each tool's ``RunContext.deps`` holds. ``replay`` maps tool names to replay policies,
    over the ``replay(...)`` metadata of each tool; a tool with neither is ``unsafe``.
    ``tools`` are fxdurable tools added to the agent's own (``fx.mcp_tools(server)``): shown
    to the pydantic-ai model as function tools, each run by fxdurable with its own replay
    policy (an MCP tool's from its annotations) and context. ``stream=False`` for a model
    without streamed requests. A tool with pydantic-ai's ``requires_approval=True`` asks a
    person before each call (``fx.ask``; answered with ``session.answer``). Raises
    :class:`ConfigurationError` for what this adapter does not make durable (a structured
    output type, a policy for a tool the agent lacks). An external tool's call (pydantic-ai's
    ``ExternalToolset``) asks for its result instead (``session.answer(tool_result(value))``),
    so ``output_type=[str, DeferredToolRequests]`` is accepted: the output is always a str."""
    agent_name = name or agent.name
    if not agent_name:
        raise ConfigurationError("durable_agent needs a name (name=... or Agent(name=...))")
    if not _text_output(agent.output_type):
        raise ConfigurationError(
            f"{agent_name}: output_type {agent.output_type!r} is not supported by the "
            "fxdurable adapter (its output tools and validators run in pydantic-ai's own "
            "loop); use a str output"
        )
    if agent.model is None:
        raise ConfigurationError(f"{agent_name}: the pydantic-ai agent has no model")
    model = infer_model(agent.model)
    toolset = CombinedToolset(list(agent.toolsets))
    found = _run_to_end(lambda: _tools_of(toolset, model, deps))
    overrides = dict(replay or {})
    unknown = sorted(set(overrides) - set(found))
    if unknown:
        raise ConfigurationError(f"{agent_name}: replay names tools the agent lacks: {unknown}")
    found_tools: list[FrameworkTool | ExternalTool] = []
    for tool_name, definition in found.items():
        kind = definition.tool_def.kind
        if kind == "external":
            if tool_name in overrides:
                raise ConfigurationError(
                    f"{agent_name}: {tool_name!r} is an external tool: nothing runs it here "
                    "(its result is an answer), so it takes no replay policy"
                )
            found_tools.append(ExternalTool(definition))
            continue
        if kind not in ("function", "unapproved"):
            raise ConfigurationError(
                f"{agent_name}: tool {tool_name!r} is a {kind!r} tool, which the fxdurable "
                "adapter does not run"
            )
        policy = overrides.get(tool_name) or _policy_of(agent_name, definition)
        found_tools.append(
            FrameworkTool(definition, toolset=toolset, model=model, deps=deps, policy=policy)
        )
    approvals = frozenset(
        t.name for t in found_tools if isinstance(t, FrameworkTool) and t.approval
    )
    externals = frozenset(t.name for t in found_tools if isinstance(t, ExternalTool))
    added = added_tools(tools, agent=agent_name, taken=found)
    definitions = {t.name: t.definition.tool_def for t in found_tools}
    definitions.update({t.name: _definition(t) for t in added})
    return Agent(
        agent_name,
        FrameworkModel(model, definitions, settings=model_settings, stream=stream),
        instructions=instructions,
        tools=[*found_tools, *added],
        durability=durability,
        before_tool=_asking_before(approvals, externals) if approvals or externals else None,
        # pydantic-ai's ``sequential`` tools must not overlap with others.
        parallel_tools=not any(t.definition.tool_def.sequential for t in found_tools),
    )


def _text_output(output_type: object) -> bool:
    """``str``, or ``str`` with ``DeferredToolRequests`` (a list or a union of the two): a
    deferred call asks a question here instead of ending the run, so the output is a str."""
    if output_type is str:
        return True
    members = output_type if isinstance(output_type, list) else typing.get_args(output_type)
    return set(members) == {str, DeferredToolRequests}


def _definition(tool: Tool) -> ToolDefinition:
    """An fxdurable tool as the pydantic-ai model is shown it: a function tool of its name,
    description and JSON schema (not strict: an MCP server's schema is its own)."""
    seen = shown(tool)
    return ToolDefinition(
        name=seen.name,
        description=seen.description,
        parameters_json_schema=seen.parameters,
        metadata={REPLAY_KEY: tool.policy},
    )


def _asking_before(
    approvals: frozenset[str], externals: frozenset[str]
) -> Callable[[str, str], Ask | None]:
    """pydantic-ai's approval tools (``requires_approval=True``) and external tools as
    fxdurable questions: the turn waits, durably and holding no lease, until
    ``session.answer(...)``: for an approval ``fx.allow()`` (the call runs), ``fx.deny(reason)``
    (the model reads the reason) or ``fx.rewrite(input)``; for an external call
    ``tool_result(value)`` (its result) or ``fx.deny(reason)``."""

    def before_tool(tool: str, arguments: str) -> Ask | None:
        if tool in approvals:
            return ask(f"Allow {tool} with {arguments}?")
        if tool in externals:
            return ask(f"Result of {tool} with {arguments}?")
        return None

    return before_tool


def _policy_of(agent_name: str, definition: ToolsetTool[Any]) -> ReplayPolicy:
    value = (definition.tool_def.metadata or {}).get(REPLAY_KEY, DEFAULT_POLICY)
    if value not in REPLAY_POLICIES:
        raise ConfigurationError(
            f"{agent_name}: tool {definition.tool_def.name!r} has replay policy {value!r}; "
            f"one of {', '.join(map(repr, REPLAY_POLICIES))}"
        )
    policy: ReplayPolicy = value
    return policy


async def _tools_of(
    toolset: AbstractToolset[Any], model: PydanticAIModel, deps: object
) -> dict[str, ToolsetTool[Any]]:
    """The toolset's tools, listed once when the agent is built: an fxdurable agent's tools
    are fixed for a deploy (recovery resolves each interrupted call by its tool's policy)."""
    ctx = RunContext(deps=deps, model=model, usage=RunUsage())
    async with toolset:
        return await toolset.get_tools(ctx)


def _run_to_end(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end from sync code, inside a running event loop too (an agent
    built in an ``async def``): then in a thread of its own, with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(make))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _awaited(make)).result()


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()
