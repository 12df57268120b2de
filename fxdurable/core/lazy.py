"""Lazy re-exports for a package's ``__init__`` (PEP 562): a name's module is imported the
first time the name is read, so importing the package costs only what its caller then uses.

``__getattr__, __dir__ = lazy_exports(__name__, {"fxdurable.runtime.runtime": ("Runtime",)})``
in a package's ``__init__``, beside the same imports under ``if TYPE_CHECKING:`` so type
checkers and IDEs still see every name. A resolved name is cached in the package's globals,
so it costs one dictionary lookup from then on.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, where ``exports`` maps each module
    to the names the package re-exports from it (like the ``from module import names`` lines
    it replaces)."""
    table = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        try:
            module = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
