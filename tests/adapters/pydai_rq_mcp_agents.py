"""``FXD_AGENTS=<module>:agents`` for real RQ workers (``tests/workers/test_rq_adapter_mcp.py``):
the pydantic-ai agent of ``test_adapter_mcp_tools.py``, with no tools of its own and the
tools of the streamable-HTTP MCP server on port ``FXD_TEST_MCP_HTTP`` (which the test
started), its outside world in ``FXD_TEST_WORLD``. Each work horse arms the next crash of
``FXD_TEST_CRASH_PLAN`` (``rq_story_agents.arm_crash_plan``) at the start of its job."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rq_story_agents import arm_crash_plan

import fxdurable as fx
from tests.kit.world_env import world_from_env


def agents() -> list[fx.Agent]:
    arm_crash_plan()
    # The agent's modules import their neighbours by name (pydai_agent, pydai_checks ...).
    here = str(Path(os.environ["FXD_TEST_ADAPTERS"]))
    if here not in sys.path:
        sys.path.insert(0, here)
    from test_adapter_mcp_tools import build

    world = world_from_env()
    return [build("pydantic-ai", world, int(os.environ["FXD_TEST_MCP_HTTP"]))]
