"""The durable core is synchronous, stdlib-only and deterministic: checked, not hoped for.

Every module under ``fxdurable/core/`` is parsed with ``ast`` (not imported, so a forbidden
import inside a function or an ``if TYPE_CHECKING`` block is caught too). Which of our own
layers the core may import is in the package-wide matrix, ``tests/test_layer_matrix.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fxdurable.core
from tests.layering import imported_modules, rel

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


def layer_violations(source: str, path: Path) -> list[str]:
    tree = ast.parse(source, filename=str(path))
    problems = []
    for lineno, name in imported_modules(tree, path):
        top = name.split(".")[0]
        if top in FORBIDDEN_TOP:
            problems.append(f"{rel(path)}:{lineno} imports {name}")
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
                problems.append(f"{rel(path)}:{node.lineno} uses {dotted}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if dotted in NONDETERMINISTIC:
                    problems.append(f"{rel(path)}:{node.lineno} imports {dotted}")
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                if name and name.split(".")[0] in NONDETERMINISTIC_MODULES:
                    problems.append(f"{rel(path)}:{node.lineno} imports {name}")
    return problems


def test_core_modules_are_found() -> None:
    names = {str(p.relative_to(CORE)) for p in CORE_MODULES}
    assert {"states.py", "journal/__init__.py", "store.py", "records.py", "clock.py"} <= names


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
