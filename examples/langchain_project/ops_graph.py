"""An ordinary LangChain ``create_agent`` graph made durable by fxdurable's middleware
(``DurableMiddleware``, first in ``middleware=[...]``): the graph runs as it is, and each of
its model calls and tool calls is journaled in ``.fxd/ops_graph.db``. Kill it at any point and
run the same command again: the turn continues from its last recorded call, and a deploy that
was cut short is never repeated blindly.

``python ops_graph.py "Deploy r1."``; the model is an offline chat model standing in for yours
(put ``"openai:gpt-5-mini"`` or any LangChain chat model in its place).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

import fxdurable as fx
from fxdurable.adapters.langchain import DurableMiddleware, tool_context, with_replay

DEPLOYS = Path("graph_deploys.log")  # stands in for your deployment API


def careful_reply(messages: list[BaseMessage]) -> AIMessage:
    """Read the status, deploy; told the deploy's outcome is unknown, check the log."""
    results = [m for m in messages if isinstance(m, ToolMessage)]
    if not results:
        return calling("read_status", region="eu")
    last = results[-1]
    if last.name == "read_status" and len(results) == 1:
        return calling("deploy", release="r1")
    if last.name == "deploy" and "may or may not have completed" in str(last.content):
        return calling("list_deploys")
    if last.name == "list_deploys":
        went = "did" if "r1" in str(last.content) else "did not"
        return AIMessage(content=f"The interrupted deploy of r1 {went} go out; not repeated.")
    return AIMessage(content="Deployed r1.")


def calling(name: str, **args: Any) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c-{name}"}])


class CarefulChatModel(BaseChatModel):
    """An offline chat model that answers from the conversation (``careful_reply``)."""

    @property
    def _llm_type(self) -> str:
        return "careful-offline"

    def bind_tools(self, tools: Any, **kwargs: Any) -> CarefulChatModel:
        return self  # it reads no schema; fxdurable validates the arguments

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=careful_reply(messages))])


@tool
def read_status(region: str) -> str:
    """Read a region's status."""
    return f"{region}: healthy"


@tool
def list_deploys() -> str:
    """List the releases deployed so far."""
    return DEPLOYS.read_text() if DEPLOYS.exists() else "(none)"


@tool
def deploy(release: str, config: RunnableConfig) -> str:
    """Deploy a release."""
    with DEPLOYS.open("a") as log:
        log.write(f"{release} {tool_context(config).execution_id}\n")
    return f"{release} deployed"


durable = DurableMiddleware()  # first in the list: the middleware after it runs inside each call
graph = create_agent(
    CarefulChatModel(),
    # The reads are safe (re-run after a crash); deploy has no policy: unsafe.
    [with_replay(read_status, "safe"), with_replay(list_deploys, "safe"), deploy],
    system_prompt="You deploy releases carefully.",
    middleware=[durable],
)
agent = durable.agent(graph, name="ops")


async def main(prompt: str) -> None:
    async with fx.Runtime([agent], store="sqlite:///.fxd/ops_graph.db") as rt:
        session = rt.session("ops")
        submission = await session.submit(prompt, request_id="deploy-r1")
        done = await session.wait(submission.id)
        print(f"{done.status}: {done.result}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "Deploy r1."))
