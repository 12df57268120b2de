"""The soak's verdict at rest: what the ledger, the store and ``fxdurable check`` say.

:func:`verify` reads everything afresh (the store through a new connection, the ledger from
its file) and returns the figures and the violations: an operation with two effects (the
ledger's own count, and :func:`fxdurable.testing.invariants.check_effects`), an effect of no
task, a request id without exactly one submission, a submission not settled exactly once,
any :func:`~fxdurable.testing.invariants.check_store` violation at rest, and a non-zero
``fxdurable check --at-rest``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.soak.ledger import CALLS, EFFECTS, LedgerEntry, double_effects, read_jsonl
from fxdurable.backends import open_store
from fxdurable.core.events import SETTLED_EVENTS
from fxdurable.core.states import SubmissionStatus
from fxdurable.testing.invariants import Effect, check_effects, check_store

__all__ = ["verify"]

_SETTLED = {SubmissionStatus.COMPLETED, SubmissionStatus.FAILED, SubmissionStatus.ABORTED}


def verify(
    store_url: str,
    world: Path,
    requests: Mapping[str, str],
    *,
    env: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """``requests``: every request id the soak submitted (retries included, once), and its
    session. Returns (figures, violations)."""
    entries = [LedgerEntry.parse(r) for r in read_jsonl(world / EFFECTS)]
    calls = read_jsonl(world / CALLS)
    problems = double_effects(entries)
    effects = [Effect(e.tool, e.execution_id, noop=e.noop) for e in entries]
    sessions = sorted(set(requests.values()))

    def body(view: Any) -> dict[str, Any]:
        summary = check_store(view, now=time.time(), at_rest=True)
        found = [str(v) for v in summary.violations]
        found += [str(v) for v in check_effects(view, effects)]
        subs = [sub for sid in sessions for sub in view.submissions(sid)]
        tasks = [t for sid in sessions for t in view.session_tool_tasks(sid)]
        events = {sid: list(view.events(sid)) for sid in sessions}
        return {"problems": found, "subs": subs, "tasks": tasks, "events": events}

    store = open_store(store_url)
    try:
        read = store.read(body)
    finally:
        store.close()
    problems += read["problems"]
    subs, tasks, events = read["subs"], read["tasks"], read["events"]

    # Each effect belongs to a call of its tool that the store knows.
    by_execution = {t.execution_id: t for t in tasks}
    for e in entries:
        task = by_execution.get(e.execution_id)
        if task is None or task.tool != e.tool:
            problems.append(f"{e.tool} effect for execution {e.execution_id}: no such call")

    # Each request id exactly one submission, settled, with exactly one settling event.
    per_request = Counter(s.request_id for s in subs)
    for request, session in sorted(requests.items()):
        if per_request[request] != 1:
            problems.append(f"request {request} ({session}): {per_request[request]} submissions")
    for sub in subs:
        if sub.status not in _SETTLED:
            problems.append(f"submission {sub.request_id} is {sub.status} at rest")
        settles = [
            e.type
            for e in events[sub.session_id]
            if e.type in SETTLED_EVENTS and e.data.get("submission") == sub.id
        ]
        if len(settles) != 1:
            problems.append(f"submission {sub.request_id} settled {len(settles)} times: {settles}")

    check = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--store", store_url, "--at-rest"],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=300,
        check=False,
    )
    if check.returncode != 0:
        problems.append(f"fxdurable check --at-rest exited {check.returncode}: {check.stdout}")

    real = [e for e in entries if not e.noop]
    figures = {
        "submissions": len(subs),
        "outcomes": dict(Counter(str(s.status) for s in subs)),
        "interruptions": sum(s.interruptions for s in subs),
        "executions": len(calls),
        "effects": len(real),
        "effects_by_policy": dict(Counter(e.policy for e in real)),
        "dedupes": len(entries) - len(real),
        "tool_outcomes": dict(Counter(str(t.status) for t in tasks)),
    }
    return figures, sorted(set(problems))
