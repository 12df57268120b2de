"""A session's timeline as data: the lines ``fxdurable trace`` prints and
``GET /sessions/{id}/trace`` answers, built once here so the two cannot drift apart.

A line is a header (``session``), one per event a person reads (its ``kind`` is the event
type, its ``cursor`` the event's), one summary per submission (``submission``) and the session's
token total (``total``). ``fork_after`` names the point a fork at that line starts from: the
event's cursor after a recorded step, a settled submission's id on its summary, else None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fxdurable.core.events import SETTLED_EVENTS, TOOL_SETTLED_EVENTS, EventType
from fxdurable.core.records import EventRecord, SessionRecord, Usage, usage_fields
from fxdurable.core.states import SubmissionStatus
from fxdurable.core.store import ReadView
from fxdurable.runtime.render import Style, cache_note, clock_time, describe

__all__ = [
    "Timeline",
    "TimelineLine",
    "Totals",
    "aborted_partials",
    "build_timeline",
    "stop_note",
]

# Events that record a step of the conversation: forking after one copies the conversation as
# it stood then (fxdurable.core.fork takes any cursor; these are the ones worth offering).
_FORK_POINTS = frozenset(
    {EventType.TURN_STARTED, EventType.MODEL_COMPLETED, EventType.CONTEXT_COMPACTED}
    | TOOL_SETTLED_EVENTS
    | SETTLED_EVENTS
)


@dataclass(slots=True)
class Totals:
    """Token and cost accounting, summed from the recorded model calls. The cache and
    reasoning counts are parts of the input and output counts, not added to them."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0

    def add(self, usage: Usage) -> None:
        self.merge(Totals(calls=1, **usage_fields(usage)))

    def merge(self, other: Totals) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_creation_tokens += other.cache_creation_tokens
        self.reasoning_tokens += other.reasoning_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def __str__(self) -> str:
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        return (
            f"{self.calls} model call(s), {self.input_tokens} input"
            f"{cache_note(self.cache_read_tokens, self.cache_creation_tokens)} + "
            f"{self.output_tokens} output tokens"
            f"{reasoning_note(self.reasoning_tokens)}{cost}"
        )


def reasoning_note(reasoning: int) -> str:
    return f" ({reasoning} reasoning)" if reasoning else ""


@dataclass(frozen=True, slots=True)
class TimelineLine:
    at: float
    kind: str
    text: str
    cursor: int | None = None
    fork_after: int | str | None = None

    def printed(self) -> str:
        """The line as ``fxdurable trace`` prints it: an event's with its cursor and time."""
        if self.cursor is None:
            return self.text
        return f"{self.cursor:>4}  {clock_time(self.at)}  {self.text}"


@dataclass(slots=True)
class Timeline:
    session: SessionRecord
    lines: list[TimelineLine] = field(default_factory=list)
    usage: Totals = field(default_factory=Totals)
    turns: int = 0
    attempts: int = 0
    interruptions: int = 0


def _usage_of(event: EventRecord) -> Usage:
    def number(key: str) -> float | None:
        value = event.data.get(key)
        return float(value) if isinstance(value, int | float) else None

    return Usage(
        input_tokens=int(number("input_tokens") or 0),
        output_tokens=int(number("output_tokens") or 0),
        cost_usd=number("cost_usd"),
        cache_read_tokens=int(number("cache_read_tokens") or 0),
        cache_creation_tokens=int(number("cache_creation_tokens") or 0),
        reasoning_tokens=int(number("reasoning_tokens") or 0),
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


def _event_lines(events: Sequence[EventRecord], style: Style) -> list[TimelineLine]:
    aborted = aborted_partials(events)
    lines = []
    for event in events:
        text = describe(event, style)
        if text is None:
            continue
        if event.seq in aborted:
            text = style.yellow("(aborted partial) ") + text
        if event.type == EventType.MODEL_COMPLETED:
            text += stop_note(event, style)
        fork = event.seq if event.type in _FORK_POINTS else None
        lines.append(TimelineLine(event.at, event.type, text, event.seq, fork))
    return lines


def build_timeline(view: ReadView, session_id: str, style: Style) -> Timeline | None:
    """The session's timeline, or None when there is no such session. Reads every event,
    submission and model call of the session: a trace is asked for one session at a time."""
    session = view.get_session(session_id)
    if session is None:
        return None
    subs = view.submissions(session_id)
    lease = "free" if session.lease.owner is None else f"held by {session.lease.host}"
    header = (
        style.bold(f"session {session.id}")
        + f"  agent={session.agent} status={session.status} lease={lease} "
        f"submissions={len(subs)}"
    )
    timeline = Timeline(session, [TimelineLine(session.created_at, "session", header)])
    events = view.events(session_id)
    timeline.lines += _event_lines(events, style)
    compactions: dict[str | None, list[Usage]] = {}
    for event in events:
        if event.type == EventType.CONTEXT_COMPACTED:
            compactions.setdefault(event.turn_id, []).append(_usage_of(event))
    for sub in subs:
        extra = f" ({sub.error.code}: {sub.error.message})" if sub.error else ""
        turn_usage = Totals()
        for call in view.model_calls(sub.id):
            turn_usage.add(call.usage)
        for usage in compactions.get(sub.id, []):
            turn_usage.add(usage)
        timeline.usage.merge(turn_usage)
        timeline.turns += 1
        timeline.attempts += sub.attempts
        timeline.interruptions += sub.interruptions
        settled = sub.status not in (SubmissionStatus.QUEUED, SubmissionStatus.RUNNING)
        text = (
            f"submission {sub.id}: {sub.status} after {sub.attempts} attempt(s), "
            f"{sub.interruptions} interrupted; {turn_usage}{extra}"
        )
        at = sub.settled_at or sub.created_at
        timeline.lines.append(
            TimelineLine(at, "submission", text, None, sub.id if settled else None)
        )
    last_at = max((line.at for line in timeline.lines), default=session.created_at)
    timeline.lines.append(TimelineLine(last_at, "total", f"session total: {timeline.usage}"))
    return timeline
