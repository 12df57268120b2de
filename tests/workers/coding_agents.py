"""The coding agent (examples/coding_agent) as real ``fxdurable worker`` processes serve it.

``WorkerHarness.use_agents`` copies this file in place of ``rq_story_agents.py``; the workers
load it with ``FXD_AGENTS=<module>:agents``. The agent is the example's ``coder`` (workspace
tools, todo list, the read-only ``explore`` subagent, a permission prompt before every
``shell`` command) on the example's scripted policy, run in process; every request it serves
is logged to ``model.log`` in the world directory (``tests.kit.story.logged_requests``), so
``assert_model_requests`` sees a recovered step served from its record.

Configuration, from the worker's environment:

- ``FXD_TEST_WORLD``: the outside world's directory (``model.log``);
- ``FXD_TEST_CODING_WORKSPACE``: ``stored`` (the default: files in the store, so every worker
  of the pool, on any host, sees them) or a directory (the directory workspace's root, shared
  by the pool's workers on this host);
- ``FXD_TEST_CRASH_PLAN`` / ``FXD_TEST_CRASH_LOG``: as in ``rq_story_agents`` (the crash
  log may name several workers' logs, ``os.pathsep``-separated: a crash plan of the pool).
"""

from __future__ import annotations

import os
from pathlib import Path

from rq_story_agents import arm_crash_plan

import fxdurable as fx
from examples.coding_agent.agent import PROJECT, coder
from examples.coding_agent.policy import coding_policy
from fxdurable import tools as fxt
from fxdurable.tools.workspace import Workspace
from tests.kit.story import logged_requests

STORED = "stored"


def workspace(spec: str) -> Workspace:
    """``stored``, or the root directory of a directory workspace; seeded with the project."""
    if spec == STORED:
        return fxt.stored(PROJECT)
    return fxt.directory(spec, template=PROJECT)


def coding_agents(world: Path, workspace_spec: str) -> list[fx.Agent]:
    """The coder the workers serve, and the submitting process registers (same name)."""
    model = fx.ScriptedModel(logged_requests(world, coding_policy), name="scripted/coder")
    return [coder(workspace(workspace_spec), model)]


def agents() -> list[fx.Agent]:
    """``FXD_AGENTS=<module>:agents``: called by every RQ work horse at the start of its job
    (where the crash plan arms), once by an SQS worker."""
    arm_crash_plan()
    world = Path(os.environ.get("FXD_TEST_WORLD") or ".")
    return coding_agents(world, os.environ.get("FXD_TEST_CODING_WORKSPACE") or STORED)
