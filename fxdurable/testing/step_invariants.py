"""The invariants of tool calls and their effects (DESIGN §5): a call's steps, its durable
steps (``ctx.step``), and the effects the outside world saw, each at most once where its policy
says so. Part of :mod:`fxdurable.testing.invariants`, which runs them for every session.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fxdurable.core.asking import waits_for_input
from fxdurable.core.events import (
    TOOL_SETTLED_EVENTS,
    EventType,
)
from fxdurable.core.records import EventRecord, SessionRecord, SubmissionRecord, ToolTaskRecord
from fxdurable.core.states import (
    SubmissionStatus,
    ToolTaskStatus,
)
from fxdurable.core.store import ReadView
from fxdurable.testing.violations import Violation

__all__ = ["SETTLED", "Effect", "check_effects", "check_steps"]

# What a submission that will not run again may be in.
SETTLED = frozenset({SubmissionStatus.COMPLETED, SubmissionStatus.FAILED, SubmissionStatus.ABORTED})


@dataclass(frozen=True, slots=True)
class Effect:
    """One external effect as the outside world saw it (e.g. a line in a deployments log).

    ``step``: the durable step (``ctx.step``) that took it, for a durable tool whose steps
    each take an effect of their own. ``noop``: not an effect but the call's record that it
    took none on purpose, because a guard it checked (its session's ``ctx.state``, the
    world) said the effect was already taken: such a call completes without an effect."""

    tool: str
    execution_id: str
    step: str | None = None
    noop: bool = False


def _lease_live(session: SessionRecord, now: float) -> bool:
    return session.lease.owner is not None and session.lease.expires_at > now


def check_steps(
    view: ReadView,
    session: SessionRecord,
    subs: Sequence[SubmissionRecord],
    events: Sequence[EventRecord],
    now: float,
    at_rest: bool,
) -> list[Violation]:
    out: list[Violation] = []
    model_events: Counter[tuple[str, int]] = Counter()
    task_events: dict[str, Counter[str]] = defaultdict(Counter)
    refreshes: Counter[str] = Counter()
    step_events: dict[str, Counter[str]] = defaultdict(Counter)  # task -> step name -> events
    # A cut stream is closed out at most once per round, however many crashes hit it.
    interrupted: Counter[tuple[str, int]] = Counter()
    for event in events:
        if event.type == EventType.MODEL_COMPLETED and event.turn_id is not None:
            model_events[(event.turn_id, int(str(event.data.get("round"))))] += 1
        elif event.type == EventType.MODEL_INTERRUPTED and event.turn_id is not None:
            interrupted[(event.turn_id, int(str(event.data.get("round"))))] += 1
        elif event.type == EventType.TOOL_STARTED or event.type in TOOL_SETTLED_EVENTS:
            task_id = str(event.data.get("task"))
            task_events[task_id][event.type] += 1
            if event.type == EventType.TOOL_STARTED and event.data.get("reason") == "refresh":
                refreshes[task_id] += 1
        elif event.type == EventType.TOOL_STEP:
            step_events[str(event.data.get("task"))][str(event.data.get("step"))] += 1
    out.extend(
        Violation("interrupted-not-once", session.id, f"model round {key} closed out x{count}")
        for key, count in interrupted.items()
        if count > 1
    )
    for sub in subs:
        calls = view.model_calls(sub.id)
        for call in calls:
            if model_events[(sub.id, call.round)] != 1:
                out.append(
                    Violation(
                        "step-recorded-not-once",
                        session.id,
                        f"model call {sub.id} round {call.round} has "
                        f"{model_events[(sub.id, call.round)]} completion events",
                    )
                )
        rounds = {c.round for c in calls}
        for key, count in model_events.items():
            if key[0] == sub.id and key[1] not in rounds:
                out.append(
                    Violation("step-without-record", session.id, f"model event {key} x{count}")
                )
        for task in view.tool_tasks(sub.id):
            seen = task_events[task.id]
            # A call a crash cut short stays running while its turn waits for a person (its
            # spent attempt budget): recovery settles it by its replay policy after the answer.
            left = at_rest or not _lease_live(session, now)
            if task.status == ToolTaskStatus.RUNNING and left and not waits_for_input(sub):
                out.append(
                    Violation(
                        "task-left-running",
                        session.id,
                        f"tool task {task.id} ({task.tool}) is running with no live owner",
                    )
                )
            if task.progress is not None and task.status != ToolTaskStatus.RUNNING:
                # Progress is the running call's state: the result replaces it at the finish.
                out.append(
                    Violation(
                        "progress-outlived-run",
                        session.id,
                        f"tool task {task.id} ({task.tool}) is {task.status} and still "
                        "carries progress",
                    )
                )
            unknown_events = seen[EventType.TOOL_OUTCOME_UNKNOWN]
            if task.status == ToolTaskStatus.OUTCOME_UNKNOWN and not unknown_events:
                out.append(
                    Violation(
                        "unknown-without-event",
                        session.id,
                        f"tool task {task.id} ({task.tool}) is outcome_unknown with no event",
                    )
                )
            out.extend(_check_durable_steps(session, task, step_events[task.id]))
            if seen[EventType.TOOL_COMPLETED] > 1 + refreshes[task.id]:
                out.append(
                    Violation(
                        "step-recorded-not-once",
                        session.id,
                        f"tool task {task.id} completed {seen[EventType.TOOL_COMPLETED]} times",
                    )
                )
    return out


def _check_durable_steps(
    session: SessionRecord, task: ToolTaskRecord, events: Counter[str]
) -> list[Violation]:
    """A durable call's steps: recorded only on a durable call, once per name, each with one
    ``tool.step`` event (and no event without its record)."""
    out: list[Violation] = []
    names = Counter(step.name for step in task.steps)
    if task.steps and not task.durable:
        out.append(
            Violation(
                "steps-on-non-durable-task",
                session.id,
                f"tool task {task.id} ({task.tool}) has steps but was never run durable",
            )
        )
    out.extend(
        Violation(
            "step-name-repeated",
            session.id,
            f"tool task {task.id} ({task.tool}) recorded step {name!r} {count} times",
        )
        for name, count in names.items()
        if count > 1
    )
    for name in sorted(set(names) | set(events)):
        if (names[name], events[name]) != (1, 1):
            out.append(
                Violation(
                    "step-recorded-not-once",
                    session.id,
                    f"tool task {task.id} ({task.tool}) step {name!r}: {names[name]} records, "
                    f"{events[name]} tool.step events",
                )
            )
    return out


def check_effects(view: ReadView, effects: Iterable[Effect]) -> list[Violation]:
    """Unsafe effects happen at most once per call; idempotent ones once per execution id.

    ``effects`` are what the outside world recorded, each tagged with the execution id the
    tool was given. Safe effects are reads and may repeat. A durable tool's effects tagged
    with their step: each step's at most once, and a completed call took at least one.
    """
    counts: Counter[tuple[str, str]] = Counter()
    step_counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    guarded: set[tuple[str, str]] = set()  # calls that took no effect on purpose
    for e in effects:
        if e.noop:
            guarded.add((e.tool, e.execution_id))
        elif e.step is None:
            counts[(e.tool, e.execution_id)] += 1
        else:
            step_counts[(e.tool, e.execution_id)][e.step] += 1
    out: list[Violation] = []
    for session in view.list_sessions():
        for task in view.session_tool_tasks(session.id):
            key = (task.tool, task.execution_id)
            n = counts.get(key, 0)
            stepped = step_counts.get(key, Counter())
            out.extend(
                Violation(
                    "step-effect-repeated",
                    session.id,
                    f"{task.tool} ({task.id}) step {step!r} took effect {count} times",
                )
                for step, count in stepped.items()
                if count > 1 and task.policy != "safe"
            )
            if task.policy in ("unsafe", "idempotent") and n > 1:
                out.append(
                    Violation(
                        f"{task.policy}-effect-repeated",
                        session.id,
                        f"{task.tool} ({task.id}) took effect {n} times",
                    )
                )
            # A call whose effects are its steps' need not take one of its own; nor does a
            # subagent call, whose effect is its child session (check_store audits it); nor
            # does a guarded call that logged it took none on purpose (Effect.noop).
            missing = (
                n != 1
                and not ((stepped or key in guarded) and n == 0)
                and task.child_session is None
            )
            if task.status == ToolTaskStatus.COMPLETED and task.policy != "safe" and missing:
                out.append(
                    Violation(
                        "effect-missing",
                        session.id,
                        f"{task.tool} ({task.id}) completed but took effect {n} times",
                    )
                )
    return out
