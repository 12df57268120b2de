"""What a module imports, read from its syntax tree (not by importing it), so an import inside
a function, an ``if TYPE_CHECKING`` block or an ``importlib.import_module("...")`` call counts
as much as one at the top. Used by the layer tests of the whole package and of the core."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Set
from pathlib import Path

import fxdurable

PACKAGE = Path(fxdurable.__file__).parent


def rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def _resolve(module: str | None, level: int, path: Path) -> str:
    """The absolute module name of ``from <level dots><module> import ...`` inside ``path``."""
    if level == 0:
        return module or ""
    package = ["fxdurable", *path.relative_to(PACKAGE).parent.parts]
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_modules(tree: ast.AST, path: Path) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``tree``; ``from a import b`` yields both
    ``a`` and ``a.b`` (``from fxdurable import runtime`` imports a layer as a name)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, path)
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif (dynamic := _dynamic_import(node)) is not None:
            found.append((node.lineno, dynamic))
    return found


def _dynamic_import(node: ast.AST) -> str | None:
    """The module ``importlib.import_module("...")`` (or ``__import__``) names, if ``node`` is
    such a call with a literal name."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
        in ("import_module", "__import__")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


# -- the module graph, for the circle test --------------------------------------------------


def module_name(path: Path) -> str:
    """``fxdurable/tools/__init__.py`` -> ``fxdurable.tools``; ``.../a/b.py`` -> ``...a.b``."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_edges(tree: ast.AST, path: Path, known: Set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` of every module of ``known`` that ``tree`` imports, anywhere in it.

    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
    ``pkg``; ``import a.b`` to the longest known prefix. A package a submodule's import passes
    through is no edge of its own: Python runs every parent package first whatever the
    importer, so counting it would make each package that re-exports its modules a circle."""
    edges: list[tuple[int, str]] = []

    def longest(name: str) -> str | None:
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in known:
                return ".".join(parts[:n])
        return None

    for node in ast.walk(tree):
        targets: list[str | None] = []
        if isinstance(node, ast.Import):
            targets = [longest(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, path)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else longest(base))
        elif (dynamic := _dynamic_import(node)) is not None:
            targets = [longest(dynamic)]
        else:
            continue
        edges.extend((node.lineno, t) for t in targets if t is not None)
    return edges


def import_graph(sources: Mapping[Path, str]) -> dict[str, dict[str, tuple[Path, int]]]:
    """module -> {module it imports: (file, line) of the first such import}."""
    names = {path: module_name(path) for path in sources}
    known = set(names.values())
    graph: dict[str, dict[str, tuple[Path, int]]] = {name: {} for name in known}
    for path, source in sources.items():
        here = names[path]
        for line, there in module_edges(ast.parse(source, filename=str(path)), path, known):
            if there != here:
                graph[here].setdefault(there, (path, line))
    return graph


def circles(graph: Mapping[str, Mapping[str, object]]) -> list[list[str]]:
    """Each import circle of ``graph`` (a strongly connected component of more than one
    module), as one cycle through it: ``[a, b, ..., a]``. Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(graph, set(c), c[0]) for c in components]


def _cycle_through(
    graph: Mapping[str, Mapping[str, object]], members: Set[str], start: str
) -> list[str]:
    """The shortest path from ``start`` back to itself inside one component (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(came_from[chain[-1]])
                    return [*reversed(chain), start]
                if w in members and w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{start} is in a component without a cycle through it")
