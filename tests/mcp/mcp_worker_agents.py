"""``FXD_AGENTS=<module>:agents`` for real ``fxdurable worker`` processes on RQ and SQS
(``tests/workers/test_mcp_on_queues.py``): one agent, ``mcp-ops``, whose tools are the test MCP
server's (``mcp_server.py``, started by the worker over stdio, its world in
``FXD_TEST_WORLD``), and whose scripted model streams a line, calls ``deploy`` once and then
answers ``done``. Each RQ work horse calls :func:`agents` at the start of its job, which arms the
next crash of ``FXD_TEST_CRASH_PLAN`` (``rq_story_agents.arm_crash_plan``, on the workers'
path); an SQS worker dies at ``FXD_CRASH_AT``.
"""

from __future__ import annotations

import os
import sys

from rq_story_agents import arm_crash_plan

import fxdurable as fx
from tests.mcp.mcp_driver import SERVER

NAME = "mcp-ops"


def model() -> fx.ScriptedModel:
    # Text before the call, in small deltas: model.mid-stream has a stream to die in.
    deploy = fx.call("deploy", version="v2")
    return fx.ScriptedModel([fx.reply("deploying v2 now", deploy), fx.reply("done")], chunk_size=4)


def stand_in() -> fx.Agent:
    """The agent as the submitting process names it: it admits, never runs a turn, so it
    starts no MCP server."""
    return fx.Agent(NAME, model())


def agents() -> list[fx.Agent]:
    arm_crash_plan()
    world = os.environ.get("FXD_TEST_WORLD") or "."
    server = fx.MCPServer.stdio(sys.executable, [SERVER, world], connect_timeout_s=15)
    return [fx.Agent(NAME, model(), tools=fx.mcp_tools(server))]
