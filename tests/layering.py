"""What a module imports, read from its syntax tree (not by importing it), so an import inside
a function, an ``if TYPE_CHECKING`` block or an ``importlib.import_module("...")`` call counts
as much as one at the top. Used by the layer tests of the whole package and of the core."""

from __future__ import annotations

import ast
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
