"""The check after each run of :mod:`bench.pg_workers`: from the database, every turn of the
run completed exactly once.

Every submission completed with the scripted answer in one attempt; every turn recorded its
``calls + 1`` model calls; every tool call completed after one run; every call's effect line
(:mod:`bench.pg_noop_agent`, written by the tool itself, apart from the store) is there exactly
once; and the wake queue drained with nothing dead-lettered. Anything else raises
:class:`ExactlyOnceError`: a bench that could lose or double a turn unseen would report a
figure for work that was not done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from bench.pg_noop_agent import DONE
from bench.pg_worker_set import SCHEMA, WorkerSet

__all__ = ["ExactlyOnceError", "check_effects", "verify"]

POLL_S = 0.01


class ExactlyOnceError(RuntimeError):
    """A run's turns, tool calls or effects in the database are not each there exactly once."""


def check_effects(lines: Sequence[str], tag: str, n: int, calls: int) -> int:
    """The run's effect lines (``session call execution_id``): every call of every turn
    exactly once. Returns how many there were."""
    seen: dict[tuple[str, int], int] = {}
    for line in lines:
        session, i, _execution = line.split()
        if session.startswith(f"{tag}-"):
            seen[(session, int(i))] = seen.get((session, int(i)), 0) + 1
    doubled = [key for key, count in seen.items() if count != 1]
    wanted = {(f"{tag}-{t}", i) for t in range(n) for i in range(calls)}
    missing = wanted - seen.keys()
    if doubled or missing or len(seen) != len(wanted):
        raise ExactlyOnceError(
            f"tool effects of {tag}: {len(missing)} missing, {len(doubled)} more than once "
            f"(e.g. {sorted(doubled)[:3] or sorted(missing)[:3]})"
        )
    return sum(seen.values())


def verify(conn: Any, group: WorkerSet, tag: str, n: int) -> str:
    """Every turn of the run completed exactly once (module docstring); what was found."""
    k = group.calls
    like = (f"{tag}-%",)
    q = conn.execute
    subs = q(
        "SELECT count(*), count(*) FILTER (WHERE status = 'completed' AND "
        f"data::jsonb->>'result_text' = %s) FROM {SCHEMA}.submissions WHERE session_id LIKE %s",
        (DONE, *like),
    ).fetchone()
    attempts = q(
        f"SELECT count(*) FROM {SCHEMA}.attempts a JOIN {SCHEMA}.submissions s "
        "ON a.submission_id = s.id WHERE s.session_id LIKE %s",
        like,
    ).fetchone()[0]
    turns, model_calls = q(
        f"SELECT count(DISTINCT t.id), count(m.turn_id) FROM {SCHEMA}.turns t "
        f"LEFT JOIN {SCHEMA}.model_calls m ON m.turn_id = t.id "
        "WHERE t.data::jsonb->>'session_id' LIKE %s",
        like,
    ).fetchone()
    tasks = q(
        "SELECT count(*), count(*) FILTER (WHERE data::jsonb->>'status' = 'completed'), "
        "coalesce(sum((data::jsonb->>'runs')::int), 0) "
        f"FROM {SCHEMA}.tool_tasks WHERE session_id LIKE %s",
        like,
    ).fetchone()
    found = {
        "submissions completed": (tuple(subs), (n, n)),
        "attempts": (attempts, n),
        "turns": (turns, n),
        "model calls": (model_calls, n * (k + 1)),
        "tool calls completed, runs": (tuple(tasks), (n * k, n * k, n * k)),
    }
    wrong = {what: got for what, (got, want) in found.items() if got != want}
    if wrong:
        raise ExactlyOnceError(f"{group.workers} workers, run {tag}: {wrong} (n={n}, k={k})")
    lines = [line for path in group.effects.iterdir() for line in path.read_text().splitlines()]
    effects = check_effects(lines, tag, n, k)
    _wait_drained(conn, group)
    return (
        f"{n} submissions completed, {attempts} attempts, {model_calls} model calls, "
        f"{tasks[0]} tool calls completed in {tasks[2]} runs, {effects} effects (each once), "
        "wake queue empty, none dead"
    )


def _wait_drained(conn: Any, group: WorkerSet, timeout: float = 30.0) -> None:
    """The wakes are deleted just after their sessions settle: wait until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        live, dead = conn.execute(
            f"SELECT count(*) FILTER (WHERE NOT dead), count(*) FILTER (WHERE dead) "
            f"FROM {SCHEMA}.fxd_wakes"
        ).fetchone()
        if dead:
            raise ExactlyOnceError(f"{group.workers} workers: {dead} wakes dead-lettered")
        if not live:
            return
        if time.monotonic() > deadline:
            raise ExactlyOnceError(f"{group.workers} workers: {live} wakes left on the queue")
        time.sleep(POLL_S)
