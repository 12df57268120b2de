"""``DurableMiddleware``: a LangChain ``create_agent`` graph, run durably as it is.

The user builds their agent as usual, with this middleware first in the list::

    durable = DurableMiddleware(replay={"read_status": "safe"})
    graph = create_agent(model, tools, middleware=[durable, *their_own])
    agent = durable.agent(graph, name="ops")  # an fxdurable Agent for a Runtime or a worker

Each turn runs the graph (``astream``) from the conversation the journal holds, inside
fxdurable's turn driver (:mod:`fxdurable.adapters._driven`): ``awrap_model_call`` and
``awrap_tool_call`` hand each call to the driver, which records it (the reply with the tool
calls it asked for; each call's intent, then its result) or, for a call the journal already
has at that position, answer it from the record. So after a SIGKILL the graph runs again
from the turn's start, its recorded model calls and tool results replayed, and the
interrupted call settled by its tool's replay policy exactly as for fxdurable's own agents.
What the graph does between the calls (its nodes, other middleware's ``before_*`` and
``after_*`` hooks) runs again on every attempt; the middleware inside this one (listed after
it) runs inside the call, and so once per recorded call.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolNode
from langgraph.types import Command

from fxdurable.adapters._driven import (
    DrivenModel,
    DrivenRun,
    DrivenTurns,
    ReplayMismatchError,
    TurnView,
    current_run,
)
from fxdurable.adapters._fx_tools import added_tools
from fxdurable.adapters.langchain._agent import (
    CALL_CONTEXT,
    FxDurableTool,
    LangChainTool,
    ToolArguments,
    policies,
)
from fxdurable.adapters.langchain._model import message_of, text_of, to_response
from fxdurable.errors import ConfigurationError
from fxdurable.runtime.agent import Agent, Durability
from fxdurable.runtime.decide import canonical_arguments
from fxdurable.runtime.hooks import BeforeTool
from fxdurable.runtime.models.base import ChatMessage
from fxdurable.runtime.tools import ReplayPolicy, Tool, ToolContext

__all__ = ["DurableMiddleware"]

ModelHandler = Callable[[ModelRequest], Awaitable[ModelResponse]]
ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


class DurableMiddleware(AgentMiddleware):
    """Journals every model call and tool call of a ``create_agent`` graph in fxdurable's
    store; list it first (outermost) in ``middleware=[...]``. ``replay`` maps tool names to
    replay policies, over each tool's ``with_replay(...)`` metadata; a tool with neither is
    ``unsafe``. ``tools`` are fxdurable tools (``fx.mcp_tools(server)``) the middleware adds
    to the graph (``create_agent`` binds a middleware's tools to the model and puts them in
    its tool node): each runs there, in the journaled call, as it runs in fxdurable's own
    agents (its replay policy, an MCP tool's from its annotations; its context). Outside an
    fxdurable turn (the graph invoked directly) it lets calls through untouched, and an
    fxdurable tool refuses to run."""

    def __init__(
        self, *, replay: Mapping[str, ReplayPolicy] | None = None, tools: Sequence[Tool] = ()
    ) -> None:
        super().__init__()
        self._replay = dict(replay or {})
        self.tools = [
            FxDurableTool.of(t) for t in added_tools(tools, agent="DurableMiddleware", taken=())
        ]
        self._graph: Any = None
        self._config: RunnableConfig | None = None
        self._turns = DrivenTurns(self._run_graph)

    def agent(
        self,
        graph: Any,
        *,
        name: str,
        durability: Durability | None = None,
        before_tool: BeforeTool | None = None,
        config: RunnableConfig | None = None,
    ) -> Agent:
        """The fxdurable :class:`Agent` that runs ``graph`` (what ``create_agent`` built with
        this middleware) as its turns. ``before_tool`` is fxdurable's hook (approvals as
        questions: ``fx.ask``), run before a call's intent; ``config`` is passed to each
        ``astream`` of the graph (a ``recursion_limit``, callbacks). Raises
        :class:`ConfigurationError` for a graph without this middleware's tools node, a
        second graph, or a replay policy for a tool the graph lacks."""
        if self._graph is not None and self._graph is not graph:
            raise ConfigurationError(
                f"{name}: this DurableMiddleware already runs another graph: give each "
                "create_agent its own"
            )
        if getattr(graph, "checkpointer", None) is not None:
            raise ConfigurationError(
                f"{name}: the graph has a LangGraph checkpointer; fxdurable's journal is "
                "what resumes it, so build it without one"
            )
        self._graph, self._config = graph, config
        tools = _graph_tools(graph)
        found = policies(tools, self._replay, agent=name)
        durable = [self._relayed(tool, policy) for tool, policy in found]
        return Agent(
            name,
            DrivenModel(self._turns, f"langchain-graph:{getattr(graph, 'name', None) or name}"),
            tools=durable,
            durability=durability,
            before_tool=before_tool,
        )

    def _relayed(self, tool: BaseTool, policy: ReplayPolicy) -> Tool:
        """The graph's ``tool`` as the driver records it, its call made by the graph."""
        if not isinstance(tool, FxDurableTool):
            return LangChainTool(tool, policy=policy, execute=self._execute)
        ours = tool.fxdurable_tool
        # Its own validation and timeout; its run is the graph's (the wrapper runs it there).
        return Tool(
            name=ours.name,
            description=ours.description,
            input_model=ours.input_model,
            execute=self._execute,
            replay=policy,
            timeout_s=ours.timeout_s,
        )

    # -- the driver's side: the turn body and each tool call ----------------------------------

    async def _run_graph(self, view: TurnView) -> object:
        messages = [message_of(m) for m in (*view.earlier, view.prompt)]
        config: RunnableConfig = {**(self._config or {})}
        config["callbacks"] = [*_callbacks(config), _TextForwarder()]
        # Streamed ("messages" mode) so that the chat model streams its reply: each token
        # reaches the driver's event log (and the HTTP line stream) through _TextForwarder.
        final: object = None
        async for mode, value in self._graph.astream(
            {"messages": messages}, config, stream_mode=["messages", "values"]
        ):
            if mode == "values":
                final = value
        return final

    async def _execute(self, arguments: ToolArguments, ctx: ToolContext) -> object:
        # Made by the graph's tool node, at this call's position; the records read first
        # settle any earlier call the graph waits on.
        history = ctx.records.conversation(ctx.session_id) if ctx.records is not None else ()
        return await self._turns.tool_call(ctx, history)

    # -- the graph's side ----------------------------------------------------------------------

    async def awrap_model_call(
        self, request: ModelRequest, handler: ModelHandler
    ) -> ModelResponse | AIMessage:
        run = current_run()
        if run is None:
            return await handler(request)
        k, slot = await run.next_model_call()
        _check_request(run, k, request.messages)
        if slot.recorded is not None:
            run.given(k, slot.recorded)
            return ModelResponse(result=[message_of(slot.recorded)])
        assert slot.live is not None
        try:
            response = await handler(request)
            answer = _reply_of(k, response)
        except Exception as exc:
            slot.live.fail(exc)
            raise
        recorded = to_response(answer)
        run.given(
            k, ChatMessage(role="assistant", text=recorded.text, tool_calls=recorded.tool_calls)
        )
        slot.live.deliver(recorded)
        return ModelResponse(result=[answer], structured_response=response.structured_response)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: ToolHandler
    ) -> ToolMessage | Command[Any]:
        run = current_run()
        if run is None:
            return await handler(request)
        call = request.tool_call
        k, index = run.position_of(call.get("id") or "")
        _check_call(run, k, index, call["name"], call["args"])
        slot = await run.tool_call((k, index))
        live = slot.live
        if slot.recorded is None and live is not None:
            ctx = live.context
            assert ctx is not None
            # The call's id is fxdurable's execution id, the same on every retry (what an
            # InjectedToolCallId argument reads, as with durable_agent).
            token = CALL_CONTEXT.set(ctx)
            try:
                made = await handler(request.override(tool_call={**call, "id": ctx.execution_id}))
                live.deliver(_result_of(made))
            except Exception as exc:
                live.fail(exc)  # recorded as the call's failure, which the model reads
            finally:
                CALL_CONTEXT.reset(token)
        # What the graph sees is what the journal recorded, however the call settled.
        await slot.settled.wait()
        recorded = slot.recorded
        assert recorded is not None
        return ToolMessage(
            content=recorded.text, tool_call_id=call.get("id") or "", name=call["name"]
        )

    # Sync twins: only outside fxdurable (a graph invoked with ``invoke``), let through.
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse | AIMessage:
        return handler(request)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return handler(request)


class _TextForwarder(AsyncCallbackHandler):
    """Hands each token a chat model streams in the turn's graph to its live model call."""

    async def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        run = current_run()
        if run is not None:
            run.stream_text(text_of(token))


def _callbacks(config: RunnableConfig) -> list[Any]:
    given = config.get("callbacks")
    if given is None:
        return []
    if isinstance(given, list):
        return list(given)
    raise ConfigurationError("DurableMiddleware.agent(config=...) takes callbacks as a list")


def _graph_tools(graph: Any) -> list[BaseTool]:
    """The tools of a ``create_agent`` graph (its tool node's, middleware tools included)."""
    nodes = getattr(graph, "nodes", None)
    if nodes is None:
        raise ConfigurationError(f"{graph!r} is not a compiled create_agent graph")
    node = nodes.get("tools")
    if node is None:
        return []
    bound = getattr(node, "bound", None)
    if not isinstance(bound, ToolNode):
        raise ConfigurationError("the graph's 'tools' node is not LangGraph's ToolNode")
    return list(bound.tools_by_name.values())


def _reply_of(k: int, response: ModelResponse) -> AIMessage:
    """The reply of a live model call, its tool calls under ids unique within the reply (the
    provider's when it gave distinct ones): the same ids the journal's history gives them."""
    messages = response.result
    if len(messages) != 1 or not isinstance(messages[0], AIMessage):
        raise ConfigurationError(
            "a model call answered with more than one message (response_format's "
            "ToolStrategy): DurableMiddleware records one reply per call; use "
            "ProviderStrategy or no response_format"
        )
    ai = messages[0]
    seen: set[str] = set()
    calls = []
    for index, call in enumerate(ai.tool_calls):
        given = call.get("id") or ""
        call_id = given if given and given not in seen else f"fx_{k}_{index}"
        seen.add(call_id)
        calls.append({**call, "id": call_id})
    # Calls LangChain could not parse stay out of the record: the graph's tool node never
    # runs them either (its model reads LangChain's own account of them).
    return ai.model_copy(update={"tool_calls": calls, "invalid_tool_calls": []})


def _result_of(made: ToolMessage | Command[Any]) -> str:
    if isinstance(made, ToolMessage):
        return made.content if isinstance(made.content, str) else text_of(made.content)
    raise ConfigurationError(
        "a tool returned a LangGraph Command: DurableMiddleware records a tool's result as "
        "the text the model reads, so tools that update the graph's state are not supported"
    )


def _check_request(run: DrivenRun, k: int, messages: Sequence[BaseMessage]) -> None:
    """Model call ``k`` must follow the turn as recorded: the first one ends with the turn's
    prompt; a later one with the previous reply's tool calls and their results."""
    if k == 0:
        said = [m for m in messages if isinstance(m, HumanMessage)]
        if not said or said[-1].text != run.view.prompt.text:
            raise ReplayMismatchError(
                f"model call 0 of the turn does not end with its prompt "
                f"{run.view.prompt.text[:80]!r}"
            )
        return
    before = run.replies.get(k - 1)
    replies = [m for m in messages if isinstance(m, AIMessage)]
    wanted = [c.provider_id for c in before.tool_calls] if before is not None else None
    found = [c.get("id") for c in replies[-1].tool_calls] if replies else None
    if wanted != found:
        raise ReplayMismatchError(
            f"model call {k} of the turn does not follow the recorded reply before it: "
            f"recorded tool calls {wanted}, the agent's request has {found}"
        )


def _check_call(run: DrivenRun, k: int, index: int, name: str, args: dict[str, Any]) -> None:
    """Tool call ``index`` of reply ``k`` must be the recorded one: same tool, same
    arguments (canonical JSON)."""
    reply = run.replies[k]
    recorded = reply.tool_calls[index]
    asked = canonical_arguments(json.dumps(args))
    if recorded.name != name or canonical_arguments(recorded.arguments) != asked:
        raise ReplayMismatchError(
            f"tool call {index} of model call {k}: recorded {recorded.name}"
            f"({recorded.arguments}), the agent asked for {name}({asked})"
        )
