"""``FXD_AGENTS=<module>:agents`` for real ``fxdurable worker`` processes on RQ and SQS
(``tests/workers/test_rq_pydantic_ai.py``, ``test_sqs_pydantic_ai.py``): the crash matrix's
agent in the framework ``FXD_TEST_FRAMEWORK`` names (``frameworks.py``; pydantic-ai when
unset), its outside world in ``FXD_TEST_WORLD``. Each work horse calls :func:`agents` at the
start of its job, which arms the next crash of ``FXD_TEST_CRASH_PLAN``
(``rq_story_agents.arm_crash_plan``, on the workers' path): the horse dies at its point once,
and the surviving RQ parent's reconciliation recovers the session in a new horse.
"""

from __future__ import annotations

import os

from rq_story_agents import arm_crash_plan

import fxdurable as fx
from tests.adapters.frameworks import ENV, build
from tests.kit.world_env import world_from_env


def agents() -> list[fx.Agent]:
    arm_crash_plan()
    world = world_from_env()
    return [build(os.environ.get(ENV) or "pydantic-ai", world)]
