"""``fxdurable trace SESSION --db PATH``: a session's timeline, one line per step."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from fxdurable.cli.render import Style, clock_time, describe
from fxdurable.core.events import EventType
from fxdurable.core.records import EventRecord, Usage
from fxdurable.core.store import ReadView, Store

__all__ = ["Totals", "aborted_partials", "print_trace", "stop_note"]


@dataclass(slots=True)
class Totals:
    """Token and cost accounting, summed from the recorded model calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None

    def add(self, usage: Usage) -> None:
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        if usage.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + usage.cost_usd

    def merge(self, other: Totals) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def __str__(self) -> str:
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        return (
            f"{self.calls} model call(s), {self.input_tokens} input + "
            f"{self.output_tokens} output tokens{cost}"
        )


def _usage_of(event: EventRecord) -> Usage:
    def number(key: str) -> float | None:
        value = event.data.get(key)
        return float(value) if isinstance(value, int | float) else None

    return Usage(
        input_tokens=int(number("input_tokens") or 0),
        output_tokens=int(number("output_tokens") or 0),
        cost_usd=number("cost_usd"),
    )


def stop_note(event: EventRecord, style: Style) -> str:
    """How a recorded model call ended: the provider's stop reason, whether it was inferred
    (the provider sent none) and, loudly, whether the answer was cut by the output limit."""
    reason = event.data.get("stop_reason")
    if not isinstance(reason, str):
        return ""
    if event.data.get("truncated"):
        return style.yellow(f"  [truncated: {reason}]")
    if event.data.get("stop_inferred"):
        return style.dim(f"  [stop: {reason}, inferred]")
    return style.dim(f"  [stop: {reason}]")


def aborted_partials(events: Sequence[EventRecord]) -> set[int]:
    """Seqs of ``model.partial`` events whose call never finished: the process died (an
    ``attempt.interrupted`` of the turn) or the stream broke (a ``model.error`` of the round)
    before that round was recorded."""
    open_partials: dict[tuple[str | None, object], list[int]] = {}
    aborted: set[int] = set()
    for event in events:
        key = (event.turn_id, event.data.get("round"))
        if event.type == EventType.MODEL_PARTIAL:
            open_partials.setdefault(key, []).append(event.seq)
        elif event.type == EventType.MODEL_COMPLETED:
            open_partials.pop(key, None)
        elif event.type == EventType.MODEL_ERROR:  # the stream broke; the retry streams anew
            aborted.update(open_partials.pop(key, []))
        elif event.type == EventType.ATTEMPT_INTERRUPTED:
            for (turn_id, round_), seqs in list(open_partials.items()):
                if turn_id == event.turn_id:
                    aborted.update(seqs)
                    del open_partials[(turn_id, round_)]
    return aborted


def print_trace(store: Store, session_id: str, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    style = Style(out)

    def read(view: ReadView) -> int:
        session = view.get_session(session_id)
        if session is None:
            known = ", ".join(s.id for s in view.list_sessions()[:10]) or "none"
            print(f"no session {session_id!r} in {store.url} (sessions: {known})", file=sys.stderr)
            return 2
        subs = view.submissions(session_id)
        lease = "free" if session.lease.owner is None else f"held by {session.lease.host}"
        print(
            style.bold(f"session {session.id}")
            + f"  agent={session.agent} status={session.status} lease={lease} "
            f"submissions={len(subs)}",
            file=out,
        )
        events = view.events(session_id)
        aborted = aborted_partials(events)
        compactions: dict[str | None, list[Usage]] = {}
        for event in events:
            if event.type == EventType.CONTEXT_COMPACTED:
                compactions.setdefault(event.turn_id, []).append(_usage_of(event))
        for event in events:
            line = describe(event, style)
            if line is None:
                continue
            if event.seq in aborted:
                line = style.yellow("(aborted partial) ") + line
            if event.type == "model.completed":
                line += stop_note(event, style)
            print(f"{event.seq:>4}  {clock_time(event.at)}  {line}", file=out)
        session_usage = Totals()
        for sub in subs:
            extra = f" ({sub.error.code}: {sub.error.message})" if sub.error else ""
            turn_usage = Totals()
            for call in view.model_calls(sub.id):
                turn_usage.add(call.usage)
            for usage in compactions.get(sub.id, []):
                turn_usage.add(usage)
            session_usage.merge(turn_usage)
            print(
                f"submission {sub.id}: {sub.status} after {sub.attempts} attempt(s), "
                f"{sub.interruptions} interrupted; {turn_usage}{extra}",
                file=out,
            )
        print(f"session total: {session_usage}", file=out)
        return 0

    return store.read(read)
