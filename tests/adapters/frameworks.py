"""The crash matrix's agent in each framework, over one outside world (``pydai_agent.py``'s
logs, checked by ``pydai_checks.py``): pydantic-ai (``pydai_agent.py``), the OpenAI Agents SDK
(``test_openai_agents_world.py``), LangChain's ``durable_agent`` (``test_langchain_agent.py``)
and a ``create_agent`` graph under ``DurableMiddleware`` (``test_langchain_middleware.py``).
Each is imported only when asked for, so a worker loads one framework. Holds no tests.

Which crash point each adapter meets on which backend (``SPREAD``; the table of
docs/frameworks/crash-matrix.md is ``markdown_table()``, checked by
``test_crash_matrix_docs.py``):

- on embedded SQLite, every adapter is killed at every point of ``pydai_checks.MATRIX`` (the
  issue's four and the idempotent note's ``tool.after-execute:record_note``);
- on each worker backend (RQ with the Redis store, RQ with the SQLite store, SQS with
  DynamoDB + S3), pydantic-ai runs the whole matrix;
- the other three adapters run the issue's four points spread over the worker backends, not
  their full product: on the two queues a Latin square (each adapter meets each point on one
  of RQ + Redis and SQS + DynamoDB, and on each queue each point is met by some adapter), and
  one point each on RQ + SQLite.

Why not the full product (3 adapters x 3 worker backends x 4 points = 36 worker runs instead of
15; each is 20-40 s of real worker processes, killed, recovered, followed up and checked, so
about 13 minutes more of the suite on a loaded 2-core machine): the backend is not the
adapters' business. An adapter only converts at the framework boundary (its model call and its
tool call: ``fxdurable/adapters/*/``); the turn loop, the leases, the commits, the wake and the
redelivery that a crash point tests on a backend are fxdurable's runtime, the same code for
every adapter and for our own agents, which the worker suites kill and recover on each of these
backends (``tests/workers``), and pydantic-ai's full matrix runs again on each.
``tests/test_layer_matrix.py`` keeps it so: the adapters import no store, queue or backend, so
no adapter code can behave differently per backend. A mistake of an adapter at a crash point (a
call not recorded before it runs, a conversation rebuilt wrong after it) shows on embedded
SQLite, where every adapter runs every point. The one interaction seen so far was timing, not a
backend: the Agents SDK building its response types on the event loop at its first step, long
enough to lose a 2 s lease on a loaded machine whatever the backend
(``test_openai_agents_crash.py`` checks they are built with the agent).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import fxdurable as fx

# framework -> the module whose build(world, durability) makes its agent (named from the
# repository, so a worker process whose path has only the repository finds it too)
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


# The four crash points, as the adapters beyond pydantic-ai meet them on the worker
# backends (the module's docstring says why not all of them everywhere).
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


BACKENDS = {  # the column of each backend in the docs' table
    "embedded": "embedded SQLite",
    "rq-sqlite": "RQ worker, SQLite store",
    "rq": "RQ worker, Redis store",
    "sqs": "SQS worker, DynamoDB + S3",
}
NAMES = {
    "pydantic-ai": "pydantic-ai",
    "openai-agents": "OpenAI Agents",
    "langchain": "LangChain",
    "langchain-graph": "LangChain graph",
}


def markdown_table(matrix: list[tuple[str, int, bool]]) -> str:
    """The crash points of ``matrix`` (pydai_checks.MATRIX) by backend, each cell the adapters
    killed there: every one on embedded SQLite, pydantic-ai everywhere, ``SPREAD``."""
    rows = ["| crash point | " + " | ".join(BACKENDS.values()) + " |"]
    rows.append("|---" * (len(BACKENDS) + 1) + "|")
    for point, *_ in matrix:
        cells = []
        for backend in BACKENDS:
            there = [
                fw
                for fw in FRAMEWORKS
                if backend == "embedded"
                or fw == FRAMEWORKS[0]
                or point in SPREAD[backend].get(fw, ())
            ]
            cells.append(", ".join(NAMES[fw] for fw in there))
        rows.append(f"| `{point}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# ``FXD_TEST_ADAPTER_MATRIX=full``: the worker tests run the full product instead of
# ``SPREAD`` (every adapter at every point of the matrix on every worker backend: 45 worker
# runs beside pydantic-ai's 15; 60 passed in 612 s on 2026-12-06), for a release or a
# change of the adapters' boundary; the default suite keeps the spread (the module's
# docstring says why).
FULL_ENV = "FXD_TEST_ADAPTER_MATRIX"


def full_product() -> bool:
    """Whether ``FXD_TEST_ADAPTER_MATRIX`` asks for the full product (``full``); anything
    else set there is a mistake, refused rather than read as the spread."""
    value = os.environ.get(FULL_ENV, "")
    if value not in ("", "full"):
        raise ValueError(f"{FULL_ENV} must be 'full' or unset, not {value!r}")
    return value == "full"


def spread(queue: str, matrix: list[tuple[str, int, bool]]) -> list[tuple[str, str, int, bool]]:
    """(framework, crash point, deploys, unknown) of the other adapters on ``queue``, with
    the expectations of ``matrix`` (pydai_checks.MATRIX): ``SPREAD``, or every point of
    ``matrix`` for each of them under ``FXD_TEST_ADAPTER_MATRIX=full``."""
    expected = {m[0]: m for m in matrix}
    if full_product():
        return [(fw, *m) for fw in FRAMEWORKS[1:] for m in matrix]
    return [(fw, *expected[p]) for fw, points in SPREAD[queue].items() for p in points]
