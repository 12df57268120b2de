"""The coding agent (examples/coding_agent) as real ``fxdurable worker`` processes serve it.

``WorkerHarness.use_agents`` copies this file in place of ``rq_story_agents.py``; the workers
load it with ``FXD_AGENTS=<module>:agents``. The agents are the example's own workers' agents
(``examples.coding_agent.agent:agents``: the coder with the workspace tools, a todo list, the
read-only ``explore`` subagent and a permission prompt before every ``shell`` command) on the
example's scripted policy in process, every request it serves logged to ``model.log`` in the
world directory (``tests.kit.story.logged_requests``), so ``assert_model_requests`` sees that
a recovered step was served from its record.

Configuration, from the worker's environment:

- ``FXD_CODING_WORKSPACE=stored`` (files in the store: every worker of the pool, on any host,
  sees them) or ``FXD_CODING_DIR`` (a directory workspace under it, shared by the pool's
  workers on this host): the example's own settings;
- ``FXD_TEST_WORLD``: the outside world's directory (``model.log``);
- ``FXD_TEST_CRASH_PLAN`` / ``FXD_TEST_CRASH_LOG``: as in ``rq_story_agents`` (the crash
  log may name several workers' logs, ``os.pathsep``-separated: a crash plan of the pool).
"""

from __future__ import annotations

from pathlib import Path

from rq_story_agents import arm_crash_plan

import fxdurable as fx
from examples.coding_agent.agent import agents as example_agents
from examples.coding_agent.policy import coding_policy
from tests.kit.story import logged_requests
from tests.kit.world_env import world_from_env


def coding_agents(world: Path) -> list[fx.Agent]:
    """The agents the workers serve, and the submitting process registers (same names)."""
    model = fx.ScriptedModel(logged_requests(world, coding_policy), name="scripted/coder")
    return example_agents(model)


def agents() -> list[fx.Agent]:
    """``FXD_AGENTS=<module>:agents``: called by every RQ work horse at the start of its job
    (where the crash plan arms), once by an SQS worker."""
    arm_crash_plan()
    return coding_agents(world_from_env())
