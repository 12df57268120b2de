"""``fxdurable check``: audit a store against the crash invariants (DESIGN §5) and, with
``--blobs``, for blobs no session names (:mod:`fxdurable.testing.blob_invariants`)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from fxdurable.core.store import Store
from fxdurable.testing.blob_invariants import check_blobs
from fxdurable.testing.invariants import check_store

__all__ = ["run_check"]


def run_check(
    store: Store, *, at_rest: bool = False, blobs: bool = False, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    summary = store.read(lambda view: check_store(view, now=time.time(), at_rest=at_rest))
    violations = list(summary.violations)
    audit = check_blobs(store) if blobs else None
    if audit is not None:
        violations += audit.violations
    for violation in violations:
        print(violation, file=out)
    if violations:
        print(f"{len(violations)} invariant violation(s) in {store.url}", file=out)
        return 1
    counted = f", {audit.blobs} blobs" if audit is not None else ""
    print(
        f"ok: {summary.sessions} sessions, {summary.submissions} submissions, "
        f"{summary.tool_tasks} tool tasks, {summary.events} events{counted}; "
        "every invariant holds",
        file=out,
    )
    return 0
