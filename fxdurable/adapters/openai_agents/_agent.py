"""An OpenAI Agents SDK ``Agent`` as an fxdurable :class:`~fxdurable.runtime.agent.Agent`.

The same mapping as the pydantic-ai adapter: a session is a durable agent's session, a turn is
a submission, each model request is a model step of fxdurable's turn driver (through the SDK's
``Model`` interface), each ``FunctionTool`` call is an fxdurable tool task with a replay policy,
and the input items the SDK model reads are rebuilt from the journal on every request. So a
SIGKILL anywhere resumes at the last recorded step, an interrupted ``unsafe`` tool is
``outcome_unknown`` and its first blind repeat refused, as for fxdurable's own agents.

Taken from the SDK agent, through its public fields: ``name``, ``instructions`` (a string),
``model`` (a ``Model``, or a name for ``model_provider``), ``model_settings``, and its
``FunctionTool`` objects (schema, description, ``on_invoke_tool``, ``timeout_seconds``,
``needs_approval``), and its ``handoffs``: each handed-off agent becomes a subagent
(:func:`fxdurable.subagent`), a tool ``transfer_to_<name>`` that runs it in a child durable
session with the task the model wrote and returns its answer to this agent. Not run: the SDK's
``Runner`` loop, so what only it does (guardrails, hooks, structured output, hosted tools,
``mcp_servers``, ``tool_use_behavior``, dynamic instructions, ``handoff(...)`` objects'
callbacks and input filters) is refused by :func:`durable_agent` instead of being dropped
quietly. MCP servers' tools come in through ``durable_agent(..., tools=fx.mcp_tools(server))``
instead: fxdurable tools the SDK model is shown as function tools, run by fxdurable.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
from agents import Agent as SDKAgent
from agents import FunctionTool, ModelSettings, RunContextWrapper
from agents.handoffs import Handoff
from agents.models.interface import Model as AgentsModel
from agents.models.interface import ModelProvider
from agents.models.multi_provider import MultiProvider
from agents.tool_context import ToolContext as SDKToolContext
from agents.usage import Usage as SDKUsage

from fxdurable.adapters._fx_tools import ShownTool, added_tools, shown
from fxdurable.adapters.openai_agents._model import FrameworkModel
from fxdurable.errors import ConfigurationError, ToolInputError
from fxdurable.runtime.agent import Agent, Durability
from fxdurable.runtime.decide import canonical_arguments
from fxdurable.runtime.hooks import Ask, ask
from fxdurable.runtime.subagent import SubagentInput, SubagentTool, subagent
from fxdurable.runtime.tools import REPLAY_POLICIES, ReplayPolicy, Tool, ToolContext, render_result

__all__ = ["REPLAY_ATTRIBUTE", "FrameworkTool", "durable_agent", "replay", "tool_context"]

# The FunctionTool attribute ``replay(...)`` sets (FunctionTool is an unhashable dataclass, so
# the policy travels on the tool itself).
REPLAY_ATTRIBUTE = "_fxdurable_replay"
# A side-effecting tool nobody classified: never re-run blindly (DESIGN §3.5).
DEFAULT_POLICY: ReplayPolicy = "unsafe"
# The fxdurable context of the call running in this task (and its sync tool's thread:
# asyncio.to_thread copies the context), for tool_context().
_CURRENT: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "fxdurable_openai_agents_tool", default=None
)


def replay(policy: ReplayPolicy) -> Callable[[FunctionTool], FunctionTool]:
    """A decorator that gives an SDK function tool its replay policy, over ``@function_tool``:
    ``"safe"`` for a read, ``"idempotent"`` for a tool that deduplicates on its execution id.
    Tools without it are ``unsafe``."""
    if policy not in REPLAY_POLICIES:
        raise ConfigurationError(
            f"replay policy must be one of {', '.join(map(repr, REPLAY_POLICIES))}, not {policy!r}"
        )

    def mark(tool: FunctionTool) -> FunctionTool:
        if not isinstance(tool, FunctionTool):
            raise ConfigurationError(
                f"replay({policy!r}) decorates a FunctionTool: put it above @function_tool"
            )
        setattr(tool, REPLAY_ATTRIBUTE, policy)
        return tool

    return mark


def tool_context(ctx: RunContextWrapper[Any]) -> ToolContext:
    """The fxdurable :class:`~fxdurable.runtime.tools.ToolContext` of the running call (its
    ``execution_id``, ``progress``, ``state``, ``lease``), from the SDK tool's context argument;
    raises :class:`ConfigurationError` when the tool runs outside fxdurable."""
    found = _CURRENT.get()
    call_id = getattr(ctx, "tool_call_id", None)
    if found is None or call_id != found.execution_id:
        raise ConfigurationError(
            f"{getattr(ctx, 'tool_name', None) or 'this tool'} runs outside an fxdurable turn: "
            "tool_context() needs the agent built by "
            "fxdurable.adapters.openai_agents.durable_agent"
        )
    return found


class ToolArguments(pydantic.BaseModel):
    """A call's arguments: the JSON object the model sent (runtime only)."""

    model_config = pydantic.ConfigDict(frozen=True)
    raw: str
    values: dict[str, Any]


class FrameworkTool(Tool):
    """An SDK ``FunctionTool`` as an fxdurable :class:`Tool`: run by its ``on_invoke_tool``
    (which validates the arguments against the SDK's own schema), recorded and replayed by
    fxdurable. The SDK tool's ``ToolContext.tool_call_id`` is fxdurable's execution id."""

    __slots__ = ("approval", "function_tool")
    function_tool: FunctionTool
    approval: bool  # needs_approval=True: a person allows each call first

    def __init__(self, function_tool: FunctionTool, *, context: object, policy: ReplayPolicy):
        async def execute(arguments: ToolArguments, ctx: ToolContext) -> Any:
            sdk_ctx = SDKToolContext(
                context=context,
                usage=SDKUsage(),
                tool_name=function_tool.name,
                # What an SDK tool reads as its call's id: fxdurable's execution id, the same
                # on every retry of this call, across crashes (its idempotency key).
                tool_call_id=ctx.execution_id,
                tool_arguments=arguments.raw,
            )
            token = _CURRENT.set(ctx)
            try:
                output = await function_tool.on_invoke_tool(sdk_ctx, arguments.raw)
            finally:
                _CURRENT.reset(token)
            return _text_of(output)

        timeout = function_tool.timeout_seconds
        super().__init__(
            name=function_tool.name,
            description=function_tool.description or function_tool.name,
            input_model=ToolArguments,
            execute=execute,
            replay=policy,
            # The SDK's per-tool timeout is enforced by its Runner, which does not run here:
            # fxdurable enforces it, and settles a call cut short by its policy.
            timeout_s=float(timeout) if timeout is not None else 300.0,
        )
        object.__setattr__(self, "function_tool", function_tool)
        object.__setattr__(self, "approval", function_tool.needs_approval is True)

    def json_schema(self) -> dict[str, Any]:
        return dict(self.function_tool.params_json_schema)

    def parse(self, arguments: str) -> pydantic.BaseModel:
        # A JSON object, as the SDK requires; its fields are validated by on_invoke_tool (the
        # SDK's pydantic model for the function), which reports a mismatch to the model.
        try:
            values = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolInputError(f"arguments are not valid JSON: {exc}") from exc
        if not isinstance(values, dict):
            raise ToolInputError(f"invalid arguments for {self.name}: expected a JSON object")
        return ToolArguments(raw=arguments if arguments.strip() else "{}", values=values)

    def canonical_input(self, arguments: str) -> str:
        return canonical_arguments(arguments)


def _text_of(output: Any) -> str:
    """A tool's output as the model reads it: text as is, the SDK's ``ToolOutputText`` as its
    text, anything else as fxdurable renders a result (JSON)."""
    if isinstance(output, pydantic.BaseModel) and getattr(output, "type", None) == "text":
        return str(getattr(output, "text", ""))
    return render_result(output)


def durable_agent(
    agent: SDKAgent[Any],
    *,
    name: str | None = None,
    context: object = None,
    replay: Mapping[str, ReplayPolicy] | None = None,
    tools: Sequence[Tool] = (),
    model_provider: ModelProvider | None = None,
    model_settings: ModelSettings | None = None,
    stream: bool = True,
    durability: Durability | None = None,
) -> Agent:
    """An fxdurable :class:`Agent` that runs the SDK ``agent``'s model and tools durably.

    ``name`` (default: the SDK agent's) binds sessions to it. ``context`` is what each tool's
    ``ToolContext.context`` holds. ``replay`` maps tool names to replay policies, over each
    tool's ``@replay(...)``; a tool with neither is ``unsafe``. ``tools`` are fxdurable tools
    added to the SDK agent's own (``fx.mcp_tools(server)``, in place of the SDK's
    ``mcp_servers``): shown to the SDK model as function tools, each run by fxdurable with its
    own replay policy (an MCP tool's from its annotations) and context. ``model_provider``
    resolves a model given by name (default: the SDK's ``MultiProvider``); ``model_settings``
    override the agent's. ``stream=False`` calls ``get_response`` instead of
    ``stream_response``. A tool with ``needs_approval=True`` asks a person before each call
    (``fx.ask``; answered with ``session.answer``). Each agent in ``handoffs`` becomes a
    subagent tool (a child session, built with the same ``context``, ``model_provider``,
    ``stream`` and ``durability``).
    Raises :class:`ConfigurationError` for what the adapter does not make durable (see the
    module docstring and docs/frameworks/openai-agents.md)."""
    options = _Options(context, model_provider, stream, durability)
    return _durable(agent, name, replay, model_settings, options, ancestors=(), added=tools)


@dataclass(frozen=True, slots=True)
class _Options:
    """What a handed-off agent is built with too."""

    context: object
    model_provider: ModelProvider | None
    stream: bool
    durability: Durability | None


def _durable(
    agent: SDKAgent[Any],
    name: str | None,
    replay: Mapping[str, ReplayPolicy] | None,
    model_settings: ModelSettings | None,
    options: _Options,
    ancestors: tuple[str, ...],
    added: Sequence[Tool] = (),
) -> Agent:
    context, model_provider = options.context, options.model_provider
    stream, durability = options.stream, options.durability
    agent_name = name or agent.name
    if not agent_name:
        raise ConfigurationError("durable_agent needs a name (name=... or Agent(name=...))")
    _refuse_runner_features(agent_name, agent)
    instructions = agent.instructions
    if instructions is not None and not isinstance(instructions, str):
        raise ConfigurationError(
            f"{agent_name}: dynamic instructions (a function) are computed by the SDK's Runner "
            "for each run; give the agent a string"
        )
    model = agent.model
    if not isinstance(model, AgentsModel):
        model = (model_provider or MultiProvider()).get_model(model)
    overrides = dict(replay or {})
    tools: list[FrameworkTool] = []
    for found in agent.tools:
        tool = _function_tool(agent_name, found)
        if tool is None:
            continue
        policy = overrides.pop(tool.name, None) or _policy_of(agent_name, tool)
        tools.append(FrameworkTool(tool, context=context, policy=policy))
    if overrides:
        raise ConfigurationError(
            f"{agent_name}: replay names tools the agent lacks: {sorted(overrides)}"
        )
    # The chain by the SDK agents' own names (a handoff names its target by them).
    handoffs = _handoff_tools(agent_name, agent, options, (*ancestors, agent.name))
    settings = agent.model_settings.resolve(model_settings)
    approvals = frozenset(t.name for t in tools if t.approval)
    extra = added_tools(added, agent=agent_name, taken=[t.name for t in [*tools, *handoffs]])
    visible = {t.name: t.function_tool for t in tools}
    visible.update({h.name: _as_function_tool(_handoff_shown(h), strict=True) for h in handoffs})
    # Not strict: an MCP server's schema is its own (the SDK's MCP tools are not either).
    visible.update({t.name: _as_function_tool(shown(t), strict=False) for t in extra})
    return Agent(
        agent_name,
        FrameworkModel(
            model,
            visible,
            settings=settings,
            stream=stream,
            label=agent.model if isinstance(agent.model, str) else "",
        ),
        instructions=instructions or "",
        tools=[*tools, *handoffs, *extra],
        durability=durability,
        before_tool=_approval_questions(approvals) if approvals else None,
        # The SDK's parallel_tool_calls=False: one call at a time.
        parallel_tools=settings.parallel_tool_calls is not False,
    )


def _refuse_runner_features(agent_name: str, agent: SDKAgent[Any]) -> None:
    """Each thing only the SDK's Runner does, refused by name (it would not run here)."""
    refused = {
        "input_guardrails": agent.input_guardrails,
        "output_guardrails": agent.output_guardrails,
        "mcp_servers (not journaled: pass durable_agent(agent, tools=fx.mcp_tools(server)) "
        "instead, each MCP call then a journaled tool call)": agent.mcp_servers,
        "hooks": agent.hooks,
        "prompt": agent.prompt,
    }
    for what, value in refused.items():
        if value:
            raise ConfigurationError(
                f"{agent_name}: {what} run in the SDK's Runner and are not made durable by the "
                "fxdurable adapter; remove them"
            )
    if agent.output_type not in (None, str):
        raise ConfigurationError(
            f"{agent_name}: output_type {agent.output_type!r} is not supported by the fxdurable "
            "adapter (the SDK's Runner parses it); use a str output"
        )
    if agent.tool_use_behavior != "run_llm_again":
        raise ConfigurationError(
            f"{agent_name}: tool_use_behavior {agent.tool_use_behavior!r} is not supported; "
            "fxdurable's turn asks the model again after each round of tool calls"
        )


def _handoff_tools(
    agent_name: str, agent: SDKAgent[Any], options: _Options, lineage: tuple[str, ...]
) -> list[SubagentTool]:
    """Each handed-off agent as a subagent tool under the SDK's own tool name and description
    (``transfer_to_<name>``). A subagent answers back to its parent, so the handoff back that
    SDK agents often carry (billing -> triage) is the parent's own turn: refused as a cycle."""
    found: list[SubagentTool] = []
    for target in agent.handoffs:
        if isinstance(target, Handoff):
            raise ConfigurationError(
                f"{agent_name}: handoff {target.tool_name!r} is a handoff(...) object; its "
                "on_handoff, input_type and input_filter run in the SDK's Runner. Put the "
                "Agent itself in handoffs=[...]: it becomes a durable subagent"
            )
        if target.name in lineage:
            raise ConfigurationError(
                f"{agent_name}: the handoff to {target.name!r} goes back up the chain "
                f"{' -> '.join((*lineage, target.name))}; a handed-off agent runs as a "
                "subagent and answers its parent, so remove the handoff back"
            )
        child = _durable(target, None, None, None, options, lineage)
        found.append(
            subagent(
                child,
                name=Handoff.default_tool_name(target),
                description=Handoff.default_tool_description(target).strip(),
            )
        )
    return found


def _handoff_shown(handoff: SubagentTool) -> ShownTool:
    """A subagent's input as its model sees it (``{"task": ...}``), strict (the SDK's default
    for a function tool): every property required, no others."""
    task = SubagentInput.model_fields["task"].description
    parameters = {
        "type": "object",
        "properties": {"task": {"type": "string", "description": task}},
        "required": ["task"],
        "additionalProperties": False,
    }
    return ShownTool(handoff.name, handoff.description, parameters)


def _as_function_tool(tool: ShownTool, *, strict: bool) -> FunctionTool:
    """What the SDK model is shown for a tool fxdurable runs itself (a subagent, an added
    fxdurable tool): a function tool of its name, description and schema. fxdurable's turn
    runs the call, never this tool's invoke."""

    async def not_run_here(ctx: Any, arguments: str) -> str:  # pragma: no cover
        raise ConfigurationError(f"{tool.name} is run by fxdurable's turn, not the SDK's Runner")

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.parameters,
        on_invoke_tool=not_run_here,
        strict_json_schema=strict,
    )


def _function_tool(agent_name: str, found: object) -> FunctionTool | None:
    """``found`` if it is a function tool fxdurable can make durable (``None``: disabled)."""
    if not isinstance(found, FunctionTool):
        raise ConfigurationError(
            f"{agent_name}: tool {getattr(found, 'name', found)!r} is a "
            f"{type(found).__name__} (hosted and built-in tools run outside fxdurable's "
            "journal); only function tools are supported"
        )
    if found.is_enabled is False:
        return None
    problems = {
        "is_enabled is a function (decided per run by the SDK's Runner)": callable(
            found.is_enabled
        ),
        "needs_approval is a function (only needs_approval=True is supported)": callable(
            found.needs_approval
        ),
        "tool guardrails run in the SDK's Runner": bool(
            found.tool_input_guardrails or found.tool_output_guardrails
        ),
        "timeout_behavior='raise_exception' (fxdurable settles a timeout by the tool's "
        "policy)": found.timeout_behavior == "raise_exception",
    }
    for what, present in problems.items():
        if present:
            raise ConfigurationError(f"{agent_name}: tool {found.name!r}: {what}")
    return found


def _approval_questions(approvals: frozenset[str]) -> Callable[[str, str], Ask | None]:
    """``needs_approval=True`` tools as fxdurable questions: the turn waits, durably and with
    no lease held, until ``session.answer(fx.allow())`` runs the call, ``fx.deny(reason)``
    gives the model the reason, or ``fx.rewrite(input)`` changes the input."""

    def before_tool(tool: str, arguments: str) -> Ask | None:
        return ask(f"Allow {tool} with {arguments}?") if tool in approvals else None

    return before_tool


def _policy_of(agent_name: str, tool: FunctionTool) -> ReplayPolicy:
    value = getattr(tool, REPLAY_ATTRIBUTE, DEFAULT_POLICY)
    if value not in REPLAY_POLICIES:
        raise ConfigurationError(
            f"{agent_name}: tool {tool.name!r} has replay policy {value!r}; "
            f"one of {', '.join(map(repr, REPLAY_POLICIES))}"
        )
    policy: ReplayPolicy = value
    return policy
