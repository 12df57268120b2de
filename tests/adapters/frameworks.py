"""The crash matrix's agent in each framework, over one outside world (``pydai_agent.py``'s
logs, checked by ``pydai_checks.py``): pydantic-ai (``pydai_agent.py``), the OpenAI Agents SDK
(``test_openai_agents_world.py``) and LangChain (``test_langchain_agent.py``). Each is imported
only when asked for, so a worker loads one framework. Holds no tests."""

from __future__ import annotations

import importlib
from pathlib import Path

import fxdurable as fx

# framework -> the module whose build(world) makes its agent (named from the repository, so a
# worker process whose path has only the repository finds it too)
MODULES = {
    "pydantic-ai": "tests.adapters.pydai_agent",
    "openai-agents": "tests.adapters.test_openai_agents_world",
    "langchain": "tests.adapters.test_langchain_agent",
    "langchain-graph": "tests.adapters.test_langchain_middleware",  # DurableMiddleware
}
FRAMEWORKS = tuple(MODULES)
ENV = "FXD_TEST_FRAMEWORK"  # which one a worker process serves (pydantic-ai when unset)


def build(framework: str, world: Path, durability: fx.Durability | None = None) -> fx.Agent:
    agent: fx.Agent = importlib.import_module(MODULES[framework]).build(world, durability)
    return agent


# The four crash points for the adapters beyond pydantic-ai, on the queues (RQ on the
# Redis store, SQS on DynamoDB). pydantic-ai runs the whole matrix (pydai_checks.MATRIX) on
# both; the others share fxdurable's turn loop and differ from it only at the framework
# boundary (the model call, the tool call), so each meets each point once, half on each
# queue: a Latin square, 8 worker runs instead of 16; and one point each on RQ + SQLite.
POINTS = (
    "model.mid-stream",
    "tool.after-intent:deploy",
    "tool.after-execute:deploy",
    "turn.in-commit",
)
SPREAD = {
    "rq": {
        "openai-agents": POINTS[0::2],
        "langchain": POINTS[1::2],
        "langchain-graph": POINTS[1::2],
    },
    # RQ on the SQLite store (workers on one host sharing a file): one point each, the one
    # that differs most per store (the settling commit, the unsafe call's intent and result).
    "rq-sqlite": {
        "openai-agents": POINTS[3:4],
        "langchain": POINTS[2:3],
        "langchain-graph": POINTS[1:2],
    },
    "sqs": {
        "openai-agents": POINTS[1::2],
        "langchain": POINTS[0::2],
        "langchain-graph": POINTS[0::2],
    },
}


def spread(queue: str, matrix: list[tuple[str, int, bool]]) -> list[tuple[str, str, int, bool]]:
    """(framework, crash point, deploys, unknown) of the other adapters on ``queue``, with
    the expectations of ``matrix`` (pydai_checks.MATRIX)."""
    expected = {m[0]: m for m in matrix}
    return [(fw, *expected[p]) for fw, points in SPREAD[queue].items() for p in points]
