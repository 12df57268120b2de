"""The package's layers import downward only: the matrix below, checked on every module.

Each module of ``fxdurable/`` is parsed (not imported: see :mod:`tests.layering`), so a lazy
import inside a function counts like one at the top. A new top-level module or package must be
given its place in ``ALLOWED`` before this test passes.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.layering import PACKAGE, imported_modules, rel

# Which other layers each layer may import (its own modules it always may). "fxdurable" is the
# public API of ``fxdurable/__init__.py`` (and ``fxdurable.__version__``); "__main__" is
# ``python -m fxdurable``.
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "core": frozenset({"errors"}),
    "stores": frozenset({"core", "errors"}),
    "queues": frozenset({"core", "errors"}),
    # The one place that turns a store or queue URL into an object.
    "backends": frozenset({"core", "errors", "stores", "queues"}),
    "runtime": frozenset({"core", "errors", "backends"}),
    "testing": frozenset({"core", "errors", "runtime"}),
    # The workspace tools (fxdurable.tools): tools like any user's, on the runtime's API.
    "tools": frozenset({"core", "errors", "runtime"}),
    # Framework adapters (fxdurable.adapters.pydantic_ai): agents of other frameworks as ours.
    "adapters": frozenset({"core", "errors", "runtime"}),
    # "tools": fx.mcp_tools and fx.MCPServer (fxdurable/tools/mcp.py), imported on first use.
    "fxdurable": frozenset({"core", "errors", "runtime", "tools"}),
    "http": frozenset({"core", "errors", "runtime", "fxdurable"}),
    # The RQ worker consumes the RQ queue itself (its connection, queue name and job function).
    "workers": frozenset({"core", "errors", "backends", "queues", "runtime"}),
    # The Lambda functions: the HTTP app, the runtime's wake handler and scan, the SQS queue.
    "aws_lambda": frozenset({"core", "errors", "backends", "queues", "runtime", "http"}),
    # The web console's static files (served by http, which finds them as package data).
    "console": frozenset(),
    "cli": frozenset(
        {
            "core",
            "errors",
            "backends",
            "runtime",
            "testing",
            "http",
            "workers",
            "fxdurable",
            "tools",
            "aws_lambda",  # fxdurable init/stage lambda
        }
    ),
    "__main__": frozenset({"cli"}),
}

MODULES = sorted(PACKAGE.rglob("*.py"))


def layer_of_path(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    if parts == ("__init__.py",):
        return "fxdurable"
    return parts[0].removesuffix(".py")


def layer_of_module(name: str) -> str | None:
    """The layer a dotted import names, or None when it is not ours."""
    parts = name.split(".")
    if parts[0] != "fxdurable":
        return None
    if len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return "fxdurable"  # the package itself, or a name it exports


def layer_violations(source: str, path: Path) -> list[str]:
    here = layer_of_path(path)
    allowed = ALLOWED.get(here)
    if allowed is None:
        return [f"{rel(path)} is in no layer: give {here!r} its place in ALLOWED"]
    problems = []
    for lineno, name in imported_modules(ast.parse(source, filename=str(path)), path):
        there = layer_of_module(name)
        if there is not None and there != here and there not in allowed:
            may = ", ".join(sorted(allowed)) or "none of ours"
            problems.append(
                f"{rel(path)}:{lineno} imports {name}: {here} may import only {may} "
                f"({there} is not one of them)"
            )
    return problems


def test_every_module_is_checked() -> None:
    assert {layer_of_path(p) for p in MODULES} == set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=rel)
def test_imports_follow_the_layer_matrix(path: Path) -> None:
    problems = layer_violations(path.read_text(), path)
    assert not problems, "\n".join(problems)


def test_the_layers_form_no_cycle() -> None:
    try:
        order = list(TopologicalSorter(ALLOWED).static_order())
    except CycleError as exc:  # pragma: no cover - the message is the point
        pytest.fail(f"the layer matrix has a cycle: {exc.args[1]}")
    assert order[0] == "errors"


# -- the checker itself catches what it should (else the tests above prove nothing) ---------


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("core/journal.py", "from fxdurable.runtime.turn import TurnDriver"),
        ("core/journal.py", "from fxdurable import runtime"),
        ("core/journal.py", "import fxdurable.stores.sqlite"),
        ("core/journal.py", "from fxdurable.queues import local"),
        ("core/journal.py", "from fxdurable.cli import main"),
        ("core/journal.py", "from ..runtime import turn"),
        ("core/journal.py", "from ..stores.sqlite import SqliteStore"),
        ("core/journal.py", "import fxdurable"),
        ("runtime/runtime.py", "from fxdurable.queues.base import WakeQueue"),
        ("runtime/runtime.py", "def f():\n    from fxdurable.stores.sqlite import SqliteStore\n"),
        ("runtime/worker.py", "from fxdurable.http.app import create_app"),
        ("http/env.py", "from fxdurable.workers.config import WorkerConfig"),
        ("http/env.py", "from fxdurable.stores.sqlite import SqliteStore"),
        ("stores/sqlite.py", "from fxdurable.backends import open_store"),
        ("backends.py", "from fxdurable.runtime.agent import Agent"),
        ("workers/rq_job.py", "from fxdurable.stores.redis import RedisStore"),
        ("testing/invariants.py", "from fxdurable.cli import render"),
        ("__init__.py", "from fxdurable.http import app_from_env"),
        ("cli/main.py", "import importlib\nimportlib.import_module('fxdurable.stores.redis')"),
    ],
)
def test_layer_checker_catches(where: str, source: str) -> None:
    assert layer_violations(source, PACKAGE / where)


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("core/journal.py", "from fxdurable.errors import IllegalTransitionError"),
        ("core/journal.py", "from .records import Lease"),
        ("runtime/worker.py", "from fxdurable.core.queue import WakeQueue"),
        ("runtime/runtime.py", "from fxdurable.backends import open_store"),
        ("http/openapi.py", "from fxdurable import __version__"),
        ("cli/main.py", "from fxdurable.workers.rq_worker import run_worker"),
        ("backends.py", "from fxdurable.queues.rq import RqQueue"),
    ],
)
def test_layer_checker_allows(where: str, source: str) -> None:
    assert layer_violations(source, PACKAGE / where) == []


def test_a_new_top_level_module_needs_a_place() -> None:
    assert layer_violations("import json", PACKAGE / "plugins" / "x.py")
