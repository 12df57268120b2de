"""``FXD_AGENTS=tests.adapters.pydai_lambda_agents:agents`` for the Lambda wake handler
(``tests/aws_lambda/test_wake_lambda_pydantic_ai.py``): the crash matrix's pydantic-ai agent
(``pydai_agent.py``), its outside world in ``FXD_TEST_WORLD``."""

from __future__ import annotations

import fxdurable as fx
from tests.adapters.frameworks import build
from tests.kit.world_env import world_from_env


def agents() -> list[fx.Agent]:
    return [build("pydantic-ai", world_from_env())]
