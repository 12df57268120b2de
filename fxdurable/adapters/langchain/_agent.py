"""A LangChain chat model and its tools as an fxdurable :class:`~fxdurable.runtime.agent.Agent`.

What ``langchain.agents.create_agent(model, tools, system_prompt=...)`` builds is a LangGraph
loop: model node, tool node, repeat. :func:`durable_agent` takes the same three things and runs
them in fxdurable's turn loop instead: each model call is a model step of fxdurable's turn
driver, each LangChain tool call an fxdurable tool task with a replay policy, and the messages
the chat model reads are rebuilt from the journal on every call. So a SIGKILL anywhere resumes
at the last recorded step, an interrupted ``unsafe`` tool is ``outcome_unknown`` and its first
blind repeat refused, exactly as for fxdurable's own agents.

Why not a middleware inside ``create_agent``'s graph (``wrap_model_call`` /
``wrap_tool_call``): the graph's loop and its state live in LangGraph, outside our journal. A
middleware can record a call, but after a SIGKILL nothing resumes LangGraph's loop from our
records (that takes LangGraph's own checkpointer, whose writes are not our transactions), and
its tool node would re-run an interrupted tool it never saw finish. Driving the model and the
tools from our loop gives every guarantee of our own agents; what is not run is LangGraph's
loop itself (docs/frameworks/langchain.md).
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic
from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import tool as as_tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from fxdurable.adapters._fx_tools import added_tools, shown
from fxdurable.adapters.langchain._model import ChatModel
from fxdurable.errors import ConfigurationError, ToolInputError
from fxdurable.runtime.agent import Agent, Durability
from fxdurable.runtime.decide import canonical_arguments
from fxdurable.runtime.tools import REPLAY_POLICIES, ReplayPolicy, Tool, ToolContext

__all__ = [
    "CALL_CONTEXT",
    "CONTEXT_KEY",
    "DEFAULT_POLICY",
    "REPLAY_KEY",
    "FxDurableTool",
    "LangChainTool",
    "ToolArguments",
    "checked_policy",
    "durable_agent",
    "policies",
    "tool_context",
    "with_replay",
]

# The ``BaseTool.metadata`` key a replay policy is read from (``with_replay`` writes it), and
# the ``RunnableConfig["configurable"]`` key under which a tool finds its ToolContext.
REPLAY_KEY = "fxdurable_replay"
CONTEXT_KEY = "fxdurable"
# The ToolContext of the call DurableMiddleware is running in this task (a sync tool's
# executor thread copies it), for tool_context().
CALL_CONTEXT: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "fxdurable_langchain_call", default=None
)
# A side-effecting tool nobody classified: never re-run blindly (DESIGN §3.5).
DEFAULT_POLICY: ReplayPolicy = "unsafe"


def checked_policy(policy: object) -> ReplayPolicy:
    if not isinstance(policy, str) or policy not in REPLAY_POLICIES:
        raise ConfigurationError(
            f"replay policy must be one of {', '.join(map(repr, REPLAY_POLICIES))}, not {policy!r}"
        )
    checked: ReplayPolicy = policy
    return checked


def with_replay(tool: BaseTool, policy: ReplayPolicy) -> BaseTool:
    """Give a LangChain tool its replay policy (in its ``metadata``) and return it:
    ``with_replay(read_status, "safe")`` for a read-only tool, ``"idempotent"`` for one that
    deduplicates on its execution id. Tools without one are ``unsafe``."""
    tool.metadata = {**(tool.metadata or {}), REPLAY_KEY: checked_policy(policy)}
    return tool


def tool_context(config: RunnableConfig) -> ToolContext:
    """The fxdurable :class:`~fxdurable.runtime.tools.ToolContext` of a LangChain tool's call
    (its ``execution_id``, ``progress``, ``state``, ``lease``), from the ``RunnableConfig``
    LangChain injects into a tool that declares a ``config: RunnableConfig`` parameter; raises
    :class:`ConfigurationError` when the tool runs outside fxdurable."""
    found = (config.get("configurable") or {}).get(CONTEXT_KEY) or CALL_CONTEXT.get()
    if not isinstance(found, ToolContext):
        raise ConfigurationError(
            "this tool runs outside an fxdurable turn: tool_context() needs the agent built "
            "by fxdurable.adapters.langchain.durable_agent, or DurableMiddleware.agent"
        )
    return found


class ToolArguments(pydantic.BaseModel):
    """A call's arguments as the model sent them, checked against the tool's schema (runtime
    only): LangChain validates them again, and injects its own arguments, when it runs."""

    model_config = pydantic.ConfigDict(frozen=True)
    values: dict[str, Any]


class LangChainTool(Tool):
    """A LangChain ``BaseTool`` as an fxdurable :class:`Tool`: validated against its
    ``tool_call_schema``, run with a tool call whose id is fxdurable's execution id (what an
    ``InjectedToolCallId`` argument reads), recorded and replayed by fxdurable."""

    __slots__ = ("framework_tool",)
    framework_tool: BaseTool

    def __init__(
        self,
        tool: BaseTool,
        *,
        policy: ReplayPolicy,
        execute: Callable[[ToolArguments, ToolContext], Any] | None = None,
    ) -> None:
        def call_of(arguments: ToolArguments, ctx: ToolContext) -> tuple[Any, RunnableConfig]:
            # The same id on every retry of this call, across crashes: the idempotency key.
            call = {
                "name": tool.name,
                "args": dict(arguments.values),
                "id": ctx.execution_id,
                "type": "tool_call",
            }
            return call, {"configurable": {CONTEXT_KEY: ctx}, "run_name": tool.name}

        def run_sync(arguments: ToolArguments, ctx: ToolContext) -> Any:
            # A sync tool runs in fxdurable's tracked thread (a lost lease stops it for good),
            # not in LangChain's executor.
            return _content(tool.invoke(*call_of(arguments, ctx)))

        async def run_async(arguments: ToolArguments, ctx: ToolContext) -> Any:
            return _content(await tool.ainvoke(*call_of(arguments, ctx)))

        # ``execute`` given: the call is made elsewhere (the agent's own graph, through
        # DurableMiddleware); this tool then only validates, records and replays it.
        if execute is None:
            execute = run_async if _is_async(tool) else run_sync
        super().__init__(
            name=tool.name,
            description=tool.description or tool.name,
            input_model=ToolArguments,
            execute=execute,
            replay=policy,
        )
        object.__setattr__(self, "framework_tool", tool)

    def json_schema(self) -> dict[str, Any]:
        # The parameters LangChain sends a provider for this tool (injected arguments left out).
        schema: dict[str, Any] = convert_to_openai_tool(self.framework_tool)["function"]
        return dict(schema.get("parameters") or {"type": "object", "properties": {}})

    def parse(self, arguments: str) -> pydantic.BaseModel:
        try:
            values = json.loads(arguments or "{}")
        except ValueError as exc:
            raise ToolInputError(f"arguments are not valid JSON: {exc}") from exc
        if not isinstance(values, dict):
            raise ToolInputError(f"arguments for {self.name} must be a JSON object")
        schema = self.framework_tool.tool_call_schema
        if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
            try:
                schema.model_validate(values)
            except pydantic.ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}"
                    for err in exc.errors()
                )
                raise ToolInputError(f"invalid arguments for {self.name}: {problems}") from exc
        return ToolArguments(values=values)

    def canonical_input(self, arguments: str) -> str:
        return canonical_arguments(arguments)


class FxDurableTool(StructuredTool):
    """An fxdurable :class:`Tool` (``fx.mcp_tools(...)``'s, say) as a LangChain tool: its
    name, description and JSON schema (``args_schema``, the tool's own, byte for byte), its
    replay policy in its metadata. Run in an fxdurable turn only, with the call's
    :class:`ToolContext` (``DurableMiddleware``'s graph: its tool node calls it there); outside
    one it refuses, since the tool reads the context (an MCP call's ``_meta`` ids)."""

    fxdurable_tool: Tool

    @classmethod
    def of(cls, tool: Tool) -> FxDurableTool:
        seen = shown(tool)

        async def run(**values: Any) -> str:
            ctx = CALL_CONTEXT.get()
            if ctx is None:
                raise ConfigurationError(
                    f"{tool.name} is an fxdurable tool: it runs in an fxdurable turn "
                    "(durable_agent, or DurableMiddleware.agent), with the call's context"
                )
            return await tool.run(tool.parse(json.dumps(values)), ctx)

        return cls(
            name=seen.name,
            description=seen.description,
            args_schema=seen.parameters,
            coroutine=run,
            metadata={REPLAY_KEY: tool.policy},
            fxdurable_tool=tool,
        )


def _is_async(tool: BaseTool) -> bool:
    """Whether the tool is run with ``ainvoke``: a ``StructuredTool`` with a coroutine, or a
    ``BaseTool`` subclass with an ``_arun`` of its own and no ``_run`` of its own."""
    if isinstance(tool, StructuredTool):
        return tool.coroutine is not None
    kind = type(tool)
    return kind._arun is not BaseTool._arun and kind._run is BaseTool._run


def _content(result: object) -> object:
    # A tool called with a tool call returns a ToolMessage: its content is what the model
    # reads (an artifact stays out of the journal, as it stays out of the model's view).
    if isinstance(result, ToolMessage):
        return result.content
    return result


def policies(
    tools: Sequence[BaseTool], replay: Mapping[str, ReplayPolicy] | None, *, agent: str
) -> list[tuple[BaseTool, ReplayPolicy]]:
    """Each tool with its replay policy: ``replay``'s (which wins), its ``with_replay``
    metadata's, else ``unsafe``. Raises :class:`ConfigurationError` for a policy naming a tool
    the agent lacks, or one that is not a policy."""
    overrides = dict(replay or {})
    unknown = sorted(set(overrides) - {t.name for t in tools})
    if unknown:
        raise ConfigurationError(f"{agent}: replay names tools the agent lacks: {unknown}")
    return [
        (
            t,
            checked_policy(
                overrides.get(t.name) or (t.metadata or {}).get(REPLAY_KEY, DEFAULT_POLICY)
            ),
        )
        for t in tools
    ]


def durable_agent(
    model: BaseChatModel | str,
    tools: Sequence[BaseTool | Tool | Callable[..., Any]] = (),
    *,
    name: str,
    system_prompt: str = "",
    replay: Mapping[str, ReplayPolicy] | None = None,
    stream: bool = True,
    durability: Durability | None = None,
) -> Agent:
    """An fxdurable :class:`Agent` that runs a LangChain chat model and tools durably: the
    arguments of ``langchain.agents.create_agent`` (``model`` a chat model or a
    ``"provider:model"`` string for ``init_chat_model``; ``tools`` LangChain tools or plain
    functions, made tools with ``@tool``; ``system_prompt``). ``tools`` may hold fxdurable
    tools too (``*fx.mcp_tools(server)``): bound to the chat model as LangChain tools of their
    JSON schema, each run by fxdurable as it is, with its own replay policy (an MCP tool's
    from its annotations) and context.

    ``name`` binds sessions to the agent. ``replay`` maps tool names to replay policies, over
    each tool's ``with_replay(...)`` metadata; a tool with neither is ``unsafe``.
    ``stream=False`` calls ``ainvoke`` instead of ``astream``. Raises
    :class:`ConfigurationError` for a tool this adapter cannot run (a provider's built-in tool
    given as a dict) or a policy for a tool the agent lacks."""
    chat = init_chat_model(model) if isinstance(model, str) else model
    if not isinstance(chat, BaseChatModel):
        raise ConfigurationError(f"{name}: model must be a LangChain BaseChatModel")
    found: list[BaseTool] = []
    ours: list[Tool] = []
    for given in tools:
        if isinstance(given, Tool):
            ours.append(given)
        elif isinstance(given, BaseTool):
            found.append(given)
        elif callable(given):
            found.append(as_tool(given))
        else:
            raise ConfigurationError(
                f"{name}: {given!r} is not a LangChain tool (provider built-in tools given "
                "as dicts run at the provider, outside fxdurable's journal)"
            )
    durable = [LangChainTool(t, policy=p) for t, p in policies(found, replay, agent=name)]
    added = added_tools(ours, agent=name, taken=[t.name for t in found])
    shown_tools = [*found, *(FxDurableTool.of(t) for t in added)]
    return Agent(
        name,
        ChatModel(chat, shown_tools, stream=stream),
        instructions=system_prompt,
        tools=[*durable, *added],
        durability=durability,
    )
