"""The boundary decision (``at_boundary``), as a table: every check the turn driver makes
before a step, in one I/O-free place. The driver's loop and its in-crossing start of the next
call (``_start_next``) both act on it; neither checks anything itself."""

from __future__ import annotations

import ast
import inspect
from typing import Any

import pytest

from fxdurable.runtime import turn
from fxdurable.runtime.decide import (
    AbortTurn,
    AskExhausted,
    Boundary,
    BoundaryAction,
    FailTurn,
    GoOn,
    RefreshReads,
    StopInvocation,
    at_boundary,
)

CLEAR: dict[str, Any] = {"abort": False, "timed_out": False, "timeout_s": 60.0, "stop_reason": None}
FIRST: dict[str, Any] = {**CLEAR, "first": True, "interruptions": 0, "max_attempts": 3}
SPENT: dict[str, Any] = {**FIRST, "interruptions": 3}


def exhausted(message: str) -> FailTurn:
    return FailTurn("attempts_exhausted", message, "attempts_exhausted")


SPENT_FAIL = exhausted("interrupted 3 times; the budget is 3 attempts")
TIMEOUT = FailTurn("timeout", "the turn ran past its 60s budget", "time_exhausted")
ASK = AskExhausted(
    "This turn was interrupted 3 times, which spends its budget of 3 attempts. Try again with "
    "a fresh budget (allow), or let it fail (deny)?"
)

TABLE: list[tuple[str, dict[str, Any], BoundaryAction]] = [
    ("nothing in the way", CLEAR, GoOn()),
    ("an abort", {**CLEAR, "abort": True}, AbortTurn()),
    ("timed out", {**CLEAR, "timed_out": True}, TIMEOUT),
    ("the invocation's deadline", {**CLEAR, "stop_reason": "deadline"}, StopInvocation("deadline")),
    # An abort wins over every budget (DESIGN §3.8).
    ("abort over timeout", {**CLEAR, "abort": True, "timed_out": True}, AbortTurn()),
    ("abort over deadline", {**CLEAR, "abort": True, "stop_reason": "deadline"}, AbortTurn()),
    ("abort over spent attempts", {**SPENT, "abort": True}, AbortTurn()),
    # The turn's own timeout settles it; the invocation's deadline only suspends it.
    ("timeout over deadline", {**CLEAR, "timed_out": True, "stop_reason": "deadline"}, TIMEOUT),
    # Attempts are counted at an attempt's first boundary only.
    ("first boundary, budget left", FIRST, GoOn()),
    ("attempts spent, fail", SPENT, SPENT_FAIL),
    ("attempts spent, ask", {**SPENT, "on_exhausted": "ask"}, ASK),
    ("attempts spent, later boundary", {**SPENT, "first": False}, GoOn()),
    (
        "a person denied going on",
        {**FIRST, "interruptions": 1, "denied": "no"},
        exhausted("interrupted 1 times; a person denied going on: no"),
    ),
    (
        "a deny wins over asking again",
        {**SPENT, "on_exhausted": "ask", "denied": "no"},
        exhausted("interrupted 3 times; a person denied going on: no"),
    ),
    (
        "spent attempts over timeout",
        {**SPENT, "timed_out": True},
        SPENT_FAIL,
    ),
    ("a recovered attempt refreshes its reads", {**FIRST, "recovered": True}, RefreshReads()),
    ("recovered and spent: no refresh", {**SPENT, "recovered": True}, SPENT_FAIL),
    ("recovered, later boundary", {**CLEAR, "recovered": True, "timed_out": True}, TIMEOUT),
    ("refresh before the timeout", {**FIRST, "recovered": True, "timed_out": True}, RefreshReads()),
]


@pytest.mark.parametrize(
    ("facts", "expected"), [(f, e) for _, f, e in TABLE], ids=[n for n, _, _ in TABLE]
)
def test_the_boundary_decides(facts: dict[str, Any], expected: BoundaryAction) -> None:
    assert at_boundary(Boundary(**facts)) == expected


def _boundary_reads(node: ast.AST) -> list[str]:
    """The boundary facts ``node`` reads: a budget's stop reason, the durability settings,
    the attempt count, a submission's abort intent (``state.abort_requested``)."""
    found = []
    for inner in ast.walk(node):
        if not isinstance(inner, ast.Attribute):
            continue
        if inner.attr in ("stop_reason", "max_attempts", "on_exhausted", "interruptions"):
            found.append(inner.attr)
        elif inner.attr == "timeout_s" and ast.unparse(inner.value).endswith("durability"):
            found.append("durability.timeout_s")
        elif inner.attr == "abort_requested" and ast.unparse(inner.value) in (
            "state",
            "self._state",
        ):
            found.append("state.abort_requested")
    return found


def test_the_driver_checks_no_boundary_itself() -> None:
    """The facts reach the decision through ``TurnDriver._boundary`` alone: no other method
    of the driver reads the abort intent, the timeout, the attempts or the deadline."""
    # The driver is split over modules (its loop, its tool-call path, their shared base):
    # every class of it is checked, not only the one the worker names.
    parts = [c for c in turn.TurnDriver.__mro__ if c.__module__.startswith("fxdurable.")]
    assert len(parts) >= 3, parts
    readers = {
        node.name: reads
        for part in parts
        for node in ast.walk(ast.parse(inspect.getsource(part)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (reads := _boundary_reads(node))
    }
    # _child_sessions hands a subagent's child the turn's end (started + timeout_s): a
    # deadline of its own to check, not a check of this turn's.
    assert set(readers) == {"_boundary", "_child_sessions"}, readers
    assert readers["_child_sessions"] == ["durability.timeout_s"]


@pytest.mark.parametrize(
    "source",
    [
        "def f(self):\n    return self._budget.stop_reason() is None\n",
        "def f(self, state):\n    return state.abort_requested\n",
        "def f(self):\n    return self._agent.durability.timeout_s\n",
        "def f(self, sub):\n    return sub.interruptions >= 3\n",
    ],
)
def test_the_reads_checker_catches(source: str) -> None:
    assert _boundary_reads(ast.parse(source))
