"""The invariant parallel tool batches rest on: an unsafe call runs alone.

Safe and idempotent calls of one response may overlap (:mod:`fxdurable.runtime.batch`); an
unsafe one may not: the calls before it have settled when it starts, and the calls after it
start once it has settled. The event log proves it: between an unsafe call's ``tool.started``
and its settle event no other call of its turn starts or settles. A ``reuse=False`` refresh
is exempt: it re-reads, after a crash, while an interrupted unsafe call waits for its policy
to settle it; it overlaps nothing that is executing.
"""

from __future__ import annotations

from collections.abc import Sequence

from fxdurable.core.events import TOOL_SETTLED_EVENTS, EventType
from fxdurable.core.records import EventRecord

__all__ = ["unsafe_overlaps"]

_SETTLED = frozenset(t.value for t in TOOL_SETTLED_EVENTS)


def unsafe_overlaps(events: Sequence[EventRecord]) -> list[str]:
    """What started or settled while an unsafe call of its turn was running, one line each
    (``check_store`` reports each as an ``unsafe-overlap``)."""
    out: list[str] = []
    unsafe_running: dict[str | None, str] = {}  # turn id -> its running unsafe task
    refreshing: set[object] = set()
    for event in events:
        task, turn = event.data.get("task"), event.turn_id
        if event.type == EventType.TOOL_STARTED and event.data.get("reason") == "refresh":
            refreshing.add(task)
            continue
        started = event.type == EventType.TOOL_STARTED
        if not started and (event.type not in _SETTLED or task in refreshing):
            refreshing.discard(task)
            continue
        running = unsafe_running.get(turn)
        if running is not None and running != task:
            what = "started" if started else "settled"
            out.append(f"tool task {task} {what} (event {event.seq}) while unsafe {running} ran")
        if started and event.data.get("policy") == "unsafe":
            unsafe_running[turn] = str(task)
        elif not started and running == task:
            del unsafe_running[turn]
    return out
