"""The durable core is synchronous, stdlib-only and deterministic: checked, not hoped for.

Every module under ``fxdurable/core/`` is parsed with ``ast`` (not imported, so a forbidden
import inside a function or an ``if TYPE_CHECKING`` block is caught too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fxdurable.core

CORE = Path(fxdurable.core.__file__).parent
CORE_MODULES = sorted(CORE.rglob("*.py"))

# Top-level packages the core may never import.
FORBIDDEN_TOP = {
    "asyncio",
    "httpx",
    "redis",
    "rq",
    "boto3",
    "botocore",
    "pydantic",
    "pydantic_core",
    "anyio",
    "trio",
}
# Layers above the core (the import direction is downward only).
FORBIDDEN_FXDURABLE = (
    "fxdurable.runtime",
    "fxdurable.stores",
    "fxdurable.queues",
    "fxdurable.cli",
    "fxdurable.http",
    "fxdurable.testing",
)
# Nondeterminism is injected through fxdurable/core/clock.py and nowhere else.
NONDETERMINISTIC = {
    "time.time",
    "time.time_ns",
    "datetime.now",
    "datetime.utcnow",
    "datetime.today",
    "date.today",
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "uuid.uuid1",
    "uuid.uuid4",
}
NONDETERMINISTIC_MODULES = {"random", "secrets"}
CLOCK = CORE / "clock.py"


def _rel(path: Path) -> str:
    return str(path.relative_to(CORE.parent.parent))


def _resolve(module: str | None, level: int, path: Path) -> str:
    """The absolute module name of ``from <level dots><module> import ...`` inside ``path``."""
    if level == 0:
        return module or ""
    package = ["fxdurable", *path.relative_to(CORE.parent).parent.parts]
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_modules(tree: ast.AST, path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, path)
            found.append((node.lineno, base))
            # ``from fxdurable import runtime`` imports a forbidden layer as a name.
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def layer_violations(source: str, path: Path) -> list[str]:
    tree = ast.parse(source, filename=str(path))
    problems = []
    for lineno, name in imported_modules(tree, path):
        top = name.split(".")[0]
        if top in FORBIDDEN_TOP:
            problems.append(f"{_rel(path)}:{lineno} imports {name}")
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_FXDURABLE):
            problems.append(f"{_rel(path)}:{lineno} imports {name} (a layer above the core)")
    return problems


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def nondeterminism(source: str, path: Path) -> list[str]:
    tree = ast.parse(source, filename=str(path))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted in NONDETERMINISTIC:
                problems.append(f"{_rel(path)}:{node.lineno} uses {dotted}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if dotted in NONDETERMINISTIC:
                    problems.append(f"{_rel(path)}:{node.lineno} imports {dotted}")
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                if name and name.split(".")[0] in NONDETERMINISTIC_MODULES:
                    problems.append(f"{_rel(path)}:{node.lineno} imports {name}")
    return problems


def test_core_modules_are_found() -> None:
    names = {p.name for p in CORE_MODULES}
    assert {"states.py", "journal.py", "store.py", "records.py", "clock.py"} <= names


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: p.name)
def test_core_imports_stay_in_their_layer(path: Path) -> None:
    assert layer_violations(path.read_text(), path) == []


@pytest.mark.parametrize("path", [p for p in CORE_MODULES if p != CLOCK], ids=lambda p: p.name)
def test_core_takes_time_and_ids_from_the_clock(path: Path) -> None:
    assert nondeterminism(path.read_text(), path) == []


def test_the_clock_is_where_time_and_ids_come_from() -> None:
    """The exemption above is for a reason: clock.py really is the one source."""
    found = nondeterminism(CLOCK.read_text(), CLOCK)
    assert any("time.time" in p for p in found)
    assert any("uuid.uuid4" in p for p in found)


# -- the checkers themselves catch what they should (else the tests above prove nothing) -----


@pytest.mark.parametrize(
    "source",
    [
        "import asyncio",
        "import httpx",
        "import redis.asyncio",
        "from rq import Queue",
        "import boto3",
        "from botocore.exceptions import ClientError",
        "from pydantic import BaseModel",
        "def f():\n    import asyncio\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import httpx\n",
        "from fxdurable.runtime.turn import TurnDriver",
        "from fxdurable import runtime",
        "import fxdurable.stores.sqlite",
        "from fxdurable.queues import local",
        "from fxdurable.cli import main",
        "from fxdurable.http import app",
        "from ..runtime import turn",
        "from ..stores.sqlite import SqliteStore",
        "import importlib\nimportlib.import_module('asyncio')",
    ],
)
def test_layer_checker_catches(source: str) -> None:
    assert layer_violations(source, CORE / "journal.py")


@pytest.mark.parametrize(
    "source",
    [
        "import json",
        "from fxdurable.errors import IllegalTransitionError",
        "from fxdurable.core.records import Lease",
        "from .records import Lease",
        "from . import states",
    ],
)
def test_layer_checker_allows(source: str) -> None:
    assert layer_violations(source, CORE / "journal.py") == []


@pytest.mark.parametrize(
    "source",
    [
        "import time\nx = time.time()",
        "import time\nx = time.time_ns()",
        "from time import time",
        "import datetime\nx = datetime.datetime.now()",
        "from datetime import datetime\nx = datetime.now()",
        "from datetime import datetime\nx = datetime.utcnow()",
        "import uuid\nx = uuid.uuid4()",
        "from uuid import uuid4",
        "import random",
        "from random import random",
        "import secrets",
    ],
)
def test_nondeterminism_checker_catches(source: str) -> None:
    assert nondeterminism(source, CORE / "journal.py")


@pytest.mark.parametrize(
    "source",
    [
        "import time\nx = time.monotonic()",  # a duration, not a recorded value
        "import hashlib\nx = hashlib.sha256(b'').hexdigest()",
        "def f(clock):\n    return clock.now()",
    ],
)
def test_nondeterminism_checker_allows(source: str) -> None:
    assert nondeterminism(source, CORE / "journal.py") == []
