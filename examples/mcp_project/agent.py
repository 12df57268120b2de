"""An agent whose tools are an MCP server's: ``python agent.py VERSION`` deploys VERSION.

The model is scripted (offline): it deploys; told the deploy's outcome is unknown, it lists
the deploys and deploys again only if the version is not there. The session is journaled in
``deploys.db``; the same command again continues the same request (its id is the version).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import fxdurable as fx
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import turn_messages

HERE = Path(__file__).resolve().parent
VERSION = sys.argv[1] if len(sys.argv) > 1 else "v1"


def careful(request: ModelRequest) -> ModelResponse:
    results = [m for m in turn_messages(request) if m.role == "tool"]
    deploy = fx.call("deploy", version=VERSION)
    if not results:
        return fx.reply(f"Deploying {VERSION}.", deploy)
    last = results[-1]
    if "may or may not have completed" in last.text:
        return fx.reply(
            "The deploy was interrupted; checking what is live.", fx.call("list_deploys")
        )
    if last.tool_name == "list_deploys":
        if VERSION in last.text.split():
            return fx.reply(f"{VERSION} did go out before the interruption; not deploying again.")
        return fx.reply(f"{VERSION} is not live; deploying it now.", deploy)
    return fx.reply(f"{last.text}.")


# The worker starts server.py over stdio (once per process) and lists its tools: deploy is
# unsafe (destructiveHint), list_deploys safe (readOnlyHint).
server = fx.MCPServer.stdio(sys.executable, [str(HERE / "server.py")])
agent = fx.Agent("deployer", fx.ScriptedModel(careful), tools=fx.mcp_tools(server))


async def main() -> None:
    async with fx.Runtime([agent], store=f"sqlite:///{HERE / 'deploys.db'}") as rt:
        answer = await rt.session("prod").run(f"Deploy {VERSION}.", request_id=f"deploy-{VERSION}")
        print(f"completed: {answer}")


if __name__ == "__main__":
    asyncio.run(main())
