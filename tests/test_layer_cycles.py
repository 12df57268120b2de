"""No import circle inside ``fxdurable``: not at the top, not under ``if TYPE_CHECKING``, not in
a function. A circle that "works" because one side imports late is still two modules that
cannot be understood (or split) apart; the fix is the shared piece in a third module.

Modules are parsed, not imported (:mod:`tests.layering`), and the graph's strongly connected
components are its circles. None is allowed: there is no list of exemptions.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.layering import PACKAGE, circles, import_graph, rel

SOURCES = {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def describe(graph: dict[str, dict[str, tuple[Path, int]]], cycle: list[str]) -> str:
    steps = []
    for here, there in itertools.pairwise(cycle):
        path, line = graph[here][there]
        steps.append(f"  {here} -> {there}  ({rel(path)}:{line})")
    return "\n".join(steps)


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph(SOURCES)
    found = circles(graph)
    assert not found, "import circles (move the shared piece to a third module):\n" + "\n\n".join(
        describe(graph, cycle) for cycle in found
    )


def test_the_graph_sees_the_package() -> None:
    graph = import_graph(SOURCES)
    assert "fxdurable.tools.stored_blobs" in graph["fxdurable.tools.stored_files"]
    assert "fxdurable.testing.violations" in graph["fxdurable.testing.questions"]


# -- the checker itself catches what it should (else the test above proves nothing) ----------


def _circles(files: dict[str, str]) -> list[list[str]]:
    return circles(import_graph({PACKAGE / name: source for name, source in files.items()}))


@pytest.mark.parametrize(
    "b_source",
    [
        "from fxdurable.zz.a import X",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fxdurable.zz.a import X\n",
        "def f():\n    from fxdurable.zz.a import X\n",
        "def f():\n    from . import a\n",
        "import fxdurable.zz.a",
        "import importlib\nimportlib.import_module('fxdurable.zz.a')",
    ],
    ids=["top", "type-checking", "function-local", "relative", "import", "import_module"],
)
def test_the_checker_catches_a_circle(b_source: str) -> None:
    found = _circles({"zz/a.py": "from fxdurable.zz.b import Y", "zz/b.py": b_source})
    assert found == [["fxdurable.zz.a", "fxdurable.zz.b", "fxdurable.zz.a"]]


def test_the_checker_reports_a_longer_circle_as_its_path() -> None:
    found = _circles(
        {
            "zz/a.py": "from fxdurable.zz import b",
            "zz/b.py": "from fxdurable.zz.c import Z",
            "zz/c.py": "def f():\n    from fxdurable.zz.a import X\n",
            "zz/d.py": "from fxdurable.zz.a import X",
        }
    )
    assert found == [["fxdurable.zz.a", "fxdurable.zz.b", "fxdurable.zz.c", "fxdurable.zz.a"]]


def test_a_package_reexporting_its_modules_is_no_circle() -> None:
    """``from pkg import module`` passes through ``pkg/__init__.py`` as every import of a
    submodule does: not an edge to the package."""
    found = _circles(
        {
            "zz/__init__.py": "from fxdurable.zz.a import X\nfrom fxdurable.zz.b import Y",
            "zz/a.py": "from fxdurable.zz import b",
            "zz/b.py": "import json",
        }
    )
    assert found == []


def test_importing_a_name_of_a_package_that_imports_you_is_a_circle() -> None:
    found = _circles(
        {
            "zz/__init__.py": "from fxdurable.zz.a import X\nY = 1",
            "zz/a.py": "from fxdurable.zz import Y\nX = 2",
        }
    )
    assert found == [["fxdurable.zz", "fxdurable.zz.a", "fxdurable.zz"]]
