"""The page's coding agent (``examples.coding_agent.web:agents``, what ``make coding-ui``
serves: diffs in its edits' results, plan mode, "don't ask again") with coding_gated.py's test
gates in ``edit_file`` and ``shell`` (``--agents tests.console.coding_gated_web:agents``), and
the page's own routes beside them (``demo_routes``, looked up in this module by ``serve``).
"""

from __future__ import annotations

import fxdurable as fx
from examples.coding_agent.web import agents as web_agents
from examples.coding_agent.web import demo_routes
from tests.console.coding_gated import gated_agents

__all__ = ["agents", "demo_routes"]


def agents() -> list[fx.Agent]:
    return gated_agents(web_agents())
