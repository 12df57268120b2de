"""Tools never reach ``Store.transact``: every write is a named journal method.

A tool gets ``ctx.records`` (reads) and ``ctx.blobs`` (content-addressed blobs), never the
store (:mod:`fxdurable.runtime.tool_records`). That holds for what a tool is handed; this test
holds it for what the tool code we ship could reach on its own: no module of
``fxdurable/tools/`` and no example's tool module names a transaction, the journal or the
store's private handle. Parsed, not imported, like the layer matrix (:mod:`tests.layering`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fxdurable as fx
from fxdurable.backends import open_store
from fxdurable.runtime.tool_records import BlobWriter, ToolRecords
from tests.layering import PACKAGE, imported_modules

ROOT = PACKAGE.parent
# The shipped tool code: the workspace tools, and the modules of the examples that define
# tools (a user copies these).
TOOL_MODULES = sorted(
    [
        *(PACKAGE / "tools").rglob("*.py"),
        PACKAGE / "cli" / "demo_agent.py",  # fxdurable demo's tools
        ROOT / "examples/lambda_project/myapp/agents.py",
        ROOT / "examples/rq_workers/myagents.py",
        ROOT / "examples/real_provider_agent/agent.py",
        ROOT / "examples/coding_agent/agent.py",
        ROOT / "examples/starlette_app/app.py",
    ]
)
# Attributes that open or reach a write path past ctx.state.
FORBIDDEN_ATTRIBUTES = {"transact", "transaction", "journal", "_journal", "_store"}
FORBIDDEN_MODULES = ("fxdurable.core.journal", "fxdurable.runtime.turn")
FORBIDDEN_NAMES = {"Tx", "Journal"}


def tool_violations(source: str, path: Path) -> list[str]:
    tree = ast.parse(source, filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            problems.append(f"{where}:{node.lineno} reaches .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            problems.append(f"{where}:{node.lineno} names {node.id}")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in FORBIDDEN_NAMES:
                    problems.append(f"{where}:{node.lineno} imports {alias.name}")
    path_for_imports = path if path.is_relative_to(PACKAGE) else PACKAGE / "tools" / "x.py"
    for lineno, name in imported_modules(tree, path_for_imports):
        if name.startswith(FORBIDDEN_MODULES):
            problems.append(f"{where}:{lineno} imports {name}")
    return problems


def test_the_tool_modules_exist() -> None:
    assert all(path.is_file() for path in TOOL_MODULES)
    assert PACKAGE / "tools" / "stored_workspace.py" in TOOL_MODULES


@pytest.mark.parametrize("path", TOOL_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_tool_code_never_reaches_a_transaction(path: Path) -> None:
    problems = tool_violations(path.read_text(), path)
    assert not problems, "\n".join(problems)


def test_what_a_tool_is_handed_cannot_transact(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'fx.db'}")
    for view in (ToolRecords(store), BlobWriter(store)):
        assert not hasattr(view, "transact")
        assert not hasattr(view, "read")  # a ReadView callback could be handed a Tx
        assert not hasattr(view, "__dict__")  # slots: nothing can be hung on it either
    fields = set(fx.ToolContext.__dataclass_fields__)
    assert "store" not in fields and {"records", "blobs"} <= fields


def test_ctx_store_is_gone() -> None:
    ctx = fx.ToolContext(execution_id="x", session_id="s", tool_name="t", attempt=1)
    assert not hasattr(ctx, "store")  # and mypy reports a use of it: no alias to hide behind


def test_the_records_view_reads_what_the_store_holds(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'fx.db'}")
    records = ToolRecords(store)
    digest = BlobWriter(store).put(b"bytes")
    assert records.get_blob(digest) == b"bytes"
    assert records.get_session("nobody") is None
    assert records.tool_tasks("no-turn") == []
    assert records.url == store.url


# -- the checker itself catches what it should (else the tests above prove nothing) ---------


@pytest.mark.parametrize(
    "source",
    [
        "def f(store):\n    store.transact(lambda tx: None)\n",
        "def f(ctx):\n    ctx.records._store.transact(None)\n",
        "from fxdurable.core.store import Tx\n",
        "from fxdurable.core.journal import Journal\n",
        "def f(rt):\n    return rt.journal\n",
        "def f():\n    from fxdurable.runtime.turn import TurnDriver\n",
        "def f(store):\n    with store.transaction() as tx:\n        pass\n",
    ],
)
def test_the_tool_checker_catches(source: str) -> None:
    assert tool_violations(source, PACKAGE / "tools" / "x.py")


@pytest.mark.parametrize(
    "source",
    [
        "def f(ctx):\n    return ctx.records.get_session(ctx.session_id)\n",
        "def f(ctx):\n    ctx.state['k'] = ctx.blobs.put(b'x')\n",
        "from fxdurable.core.store import Store\n",
    ],
)
def test_the_tool_checker_allows(source: str) -> None:
    assert tool_violations(source, PACKAGE / "tools" / "x.py") == []
