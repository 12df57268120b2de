"""``fxdurable check``: audit a store against the crash invariants (DESIGN §5)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from fxdurable.core.store import Store
from fxdurable.testing.invariants import check_store

__all__ = ["run_check"]


def run_check(store: Store, *, at_rest: bool = False, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    summary = store.read(lambda view: check_store(view, now=time.time(), at_rest=at_rest))
    for violation in summary.violations:
        print(violation, file=out)
    if summary.violations:
        print(f"{len(summary.violations)} invariant violation(s) in {store.url}", file=out)
        return 1
    print(
        f"ok: {summary.sessions} sessions, {summary.submissions} submissions, "
        f"{summary.tool_tasks} tool tasks, {summary.events} events; every invariant holds",
        file=out,
    )
    return 0
