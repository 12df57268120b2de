"""The journal package keeps its promises about itself: the facade's docstring lists every
transition, and no transition repeats the template's preamble."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import fxdurable.core.journal as journal_pkg
from fxdurable.core.journal import Journal
from fxdurable.core.journal._base import Transitions

PACKAGE = Path(journal_pkg.__file__).parent
# Public methods of the facade that are not transitions (they write nothing).
NOT_TRANSITIONS = {"now", "read", "store", "store_url"}


def test_the_facade_docstring_lists_every_transition_and_nothing_else() -> None:
    listed = set(re.findall(r"``(\w+)``", (Journal.__doc__ or "").split("A test pins")[0]))
    methods = {
        name
        for name, _ in inspect.getmembers(Journal)
        if not name.startswith("_") and name not in NOT_TRANSITIONS
    }
    assert listed == methods


def test_only_the_template_opens_a_transaction_or_a_session_scope() -> None:
    """``transact(`` and ``_SessionScope(`` appear once each, in ``Transitions._transition``;
    the session row is written back only by the scope's ``commit``, which the template calls."""
    calls: dict[str, list[str]] = {"transact": [], "_SessionScope": [], "commit": []}
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        # Module functions and methods: a transition's nested body counts as the transition.
        tops = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            tops += [n for n in cls.body if isinstance(n, ast.FunctionDef)]
        for func in tops:
            for node in ast.walk(func):
                if isinstance(node, ast.Call):
                    target = node.func
                    name = (
                        target.attr
                        if isinstance(target, ast.Attribute)
                        else getattr(target, "id", "")
                    )
                    if name in calls:
                        calls[name].append(f"{path.name}:{func.name}")
    # _transition runs _run once from the holder's records and, if they were stale, once
    # the ordinary way: the one place a transaction and a scope are opened.
    template = "_base.py:_run"
    assert set(calls["transact"]) == {template}, calls["transact"]
    assert set(calls["_SessionScope"]) == {template}, calls["_SessionScope"]
    assert set(calls["commit"]) == {template}, calls["commit"]
    assert Transitions._transition.__qualname__ == "Transitions._transition"
    assert Transitions._run.__qualname__ == "Transitions._run"
