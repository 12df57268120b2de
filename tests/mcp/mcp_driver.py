"""A real process running one session whose tools are the test MCP server's.

``python tests/mcp/mcp_driver.py --store URL --world DIR --script NAME [--http PORT]
[--request ID]``: builds ``fx.mcp_tools`` of ``tests/mcp/mcp_server.py`` (started over stdio by
this process, or reached at ``http://127.0.0.1:PORT/mcp``), submits the script's prompt to
session ``s`` (request id ``ID``, default ``r-NAME``: a rerun after a kill retries the same
submission, as a client retrying its POST would) and runs it to rest. With ``FXD_CRASH_AT``
set it dies at that crash point. On a clean exit it prints the session's tool events as JSON
lines: ``{"type", "tool", "result"}``.

Scripts: ``deploy`` (the destructive ``deploy``), ``read`` (the read-only ``read_status``),
``flag`` (the idempotent ``set_flag``); each calls its tool once and then answers ``done``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import fxdurable as fx

SERVER = str(Path(__file__).resolve().with_name("mcp_server.py"))
SCRIPTS = {
    "deploy": fx.call("deploy", version="v2"),
    "read": fx.call("read_status", service="api"),
    "flag": fx.call("set_flag", name="beta", value=True),
}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--world", required=True)
    parser.add_argument("--script", choices=sorted(SCRIPTS), required=True)
    parser.add_argument("--http", type=int, default=None)
    parser.add_argument("--request", default=None)
    args = parser.parse_args()
    if args.http is not None:
        server = fx.MCPServer.http(f"http://127.0.0.1:{args.http}/mcp", connect_timeout_s=15)
    else:
        server = fx.MCPServer.stdio(sys.executable, [SERVER, args.world], connect_timeout_s=15)
    model = fx.ScriptedModel([fx.reply("", SCRIPTS[args.script]), fx.reply("done")])
    agent = fx.Agent("ops", model, tools=fx.mcp_tools(server))
    settings = fx.WorkerSettings(lease_ttl_s=5.0, heartbeat_s=0.5, scan_interval_s=0.2)
    async with fx.Runtime([agent], store=args.store, settings=settings) as rt:
        session = rt.session("s")
        print(
            await session.run(
                f"{args.script} please", request_id=args.request or f"r-{args.script}"
            )
        )
        for event in await session.events():
            if event.type.startswith("tool.") and "result" in event.data:
                line = {"type": event.type, "tool": event.data["tool"]}
                print(json.dumps(line | {"result": event.data["result"]}))


if __name__ == "__main__":
    asyncio.run(main())
