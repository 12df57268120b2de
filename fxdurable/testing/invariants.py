"""The crash invariants of DESIGN §5, checked from the store (and a log of external effects).

One checker for every store/queue pair: it reads only through :class:`ReadView`. A crash test
runs it after every restart-to-rest; ``fxdurable check`` runs it on a production store.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fxdurable.core.asking import waits_for_input
from fxdurable.core.events import (
    SETTLED_EVENTS,
    SETTLED_OUTCOME,
    TOOL_SETTLED_EVENTS,
    EventType,
)
from fxdurable.core.fork import is_fork_copy
from fxdurable.core.records import EventRecord, SessionRecord, SubmissionRecord, ToolTaskRecord
from fxdurable.core.session_state import fold_state
from fxdurable.core.states import (
    AttemptStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
)
from fxdurable.core.store import ReadView
from fxdurable.core.subagent import child_request_id, child_session_id
from fxdurable.testing.batches import unsafe_overlaps
from fxdurable.testing.questions import check_questions
from fxdurable.testing.violations import Violation

__all__ = ["Effect", "StoreSummary", "Violation", "check_effects", "check_store"]

_SETTLED = {SubmissionStatus.COMPLETED, SubmissionStatus.FAILED, SubmissionStatus.ABORTED}
# Each carries the ``count`` of pending steering entries it resolved.
_STEERING_RESOLVED = frozenset(
    {EventType.STEER_DELIVERED, EventType.STEER_DROPPED, EventType.STEER_REQUEUED}
)
_UNSETTLED_TASK = {ToolTaskStatus.PENDING, ToolTaskStatus.RUNNING}
_TURN_FOR = {
    SubmissionStatus.COMPLETED: TurnStatus.COMPLETED,
    SubmissionStatus.FAILED: TurnStatus.FAILED,
    SubmissionStatus.ABORTED: TurnStatus.ABORTED,
}


@dataclass(frozen=True, slots=True)
class StoreSummary:
    sessions: int
    submissions: int
    tool_tasks: int
    events: int
    violations: tuple[Violation, ...]


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


def check_store(view: ReadView, *, now: float, at_rest: bool = False) -> StoreSummary:
    """Every invariant that the store alone can prove.

    ``at_rest``: the caller knows no worker is running (a crash test after its final run), so
    any unsettled submission or running task is a violation, not work in progress.
    """
    violations: list[Violation] = []
    n_subs = n_tasks = n_events = 0
    request_ids: Counter[str] = Counter()
    for session in view.list_sessions():
        subs = view.submissions(session.id)
        events = view.events(session.id)
        n_subs += len(subs)
        n_events += len(events)
        session_tasks = view.session_tool_tasks(session.id)
        n_tasks += len(session_tasks)
        request_ids.update(s.request_id for s in subs)
        violations += _check_events(session, events)
        violations += _check_submissions(view, session, subs, events, now, at_rest)
        violations += _check_steps(view, session, subs, events, now, at_rest)
        violations += _check_steering(session, events)
        violations += _check_messages(view, session, events)
        violations += check_questions(view, session, subs, events)
        violations += _check_subagents(view, session, session_tasks)
        violations += _check_state(session, events)
        violations += [Violation("unsafe-overlap", session.id, o) for o in unsafe_overlaps(events)]
    for request_id, count in request_ids.items():
        if count > 1:
            violations.append(
                Violation("request-id-reused", "*", f"request {request_id} has {count} submissions")
            )
    return StoreSummary(
        sessions=len(view.list_sessions()),
        submissions=n_subs,
        tool_tasks=n_tasks,
        events=n_events,
        violations=tuple(violations),
    )


def _check_steering(session: SessionRecord, events: Sequence[EventRecord]) -> list[Violation]:
    """Nothing typed is lost: each steering entry is pending, delivered, dropped by an abort,
    or requeued as a submission, exactly once."""
    recorded = sum(1 for e in events if e.type == EventType.STEER_RECORDED)
    resolved = 0
    for e in events:
        count = e.data.get("count")
        if e.type in _STEERING_RESOLVED and isinstance(count, int):
            resolved += count
    if recorded != resolved + len(session.steering):
        return [
            Violation(
                "steering-lost",
                session.id,
                f"{recorded} steering entries recorded, {resolved} resolved, "
                f"{len(session.steering)} pending",
            )
        ]
    return []


def _check_messages(
    view: ReadView, session: SessionRecord, events: Sequence[EventRecord]
) -> list[Violation]:
    """Messages are gap-free from seq 1, each with a cursor of an event written. A fork
    (``session.created`` naming ``forked_from``) holds exactly the messages it says it
    copied, under turn ids of its own, a result for every call its copied replies name, and
    its copied tool results are all settled: a fork starts with no work (``Journal.fork``)."""
    out: list[Violation] = []
    messages = view.messages(session.id)
    seqs = [m.seq for m in messages]
    if seqs != list(range(1, len(seqs) + 1)) or session.next_message_seq != len(seqs) + 1:
        out.append(
            Violation(
                "message-gap",
                session.id,
                f"message seqs {seqs[:10]}... with next_message_seq {session.next_message_seq}",
            )
        )
    ahead = [m.seq for m in messages if m.cursor is not None and m.cursor > len(events)]
    if ahead:
        # A message's cursor is an event of its own transaction: a fork after that event
        # takes it. One past the last event would put it after steps recorded later.
        out.append(
            Violation("message-cursor-ahead", session.id, f"messages {ahead[:10]} past events")
        )
    created = events[0] if events and events[0].type == EventType.SESSION_CREATED else None
    if created is None or created.data.get("forked_from") is None:
        return out
    copies = [m for m in messages if is_fork_copy(m.turn_id, session.id)]
    if len(copies) != created.data.get("messages") or seqs[: len(copies)] != [
        m.seq for m in copies
    ]:
        out.append(
            Violation(
                "fork-copy-mismatch",
                session.id,
                f"forked with {created.data.get('messages')} messages, holds {len(copies)} copies",
            )
        )
    tasks = view.session_tool_tasks(session.id)
    # Every call a copied reply names has its copied result: a fork is whole (on DynamoDB a
    # long fork is staged in several requests before one commit shows it; docs/dynamodb.md).
    copied_tasks = Counter(
        (t.turn_id, t.round) for t in tasks if is_fork_copy(t.turn_id, session.id)
    )
    for message in copies:
        calls = len(message.tool_calls or ())
        held = copied_tasks[(message.turn_id, message.round or 0)]
        # None held is a reply whose calls never got a task (refused before their intent):
        # the fork keeps them as the source has them.
        if calls and held and held != calls:
            out.append(
                Violation(
                    "fork-copy-results",
                    session.id,
                    f"copied message {message.seq} asks for {calls} tool calls, the fork holds "
                    f"{held} of their results",
                )
            )
    for task in tasks:
        if is_fork_copy(task.turn_id, session.id) and task.status in _UNSETTLED_TASK:
            out.append(
                Violation(
                    "fork-copied-unsettled",
                    session.id,
                    f"copied tool task {task.id} ({task.tool}) is {task.status}",
                )
            )
    return out


def _check_state(session: SessionRecord, events: Sequence[EventRecord]) -> list[Violation]:
    """The persisted state (``ctx.state``) is the fold of the session's ``state.changed``
    events, and each change by a call was committed with that call's completed result or
    durable step (the next event, same transaction): a call that failed, was cancelled or
    was left unknown never wrote."""
    out: list[Violation] = []
    folded = fold_state(events)
    if folded != dict(session.state):
        keys = sorted(set(folded) ^ set(session.state)) or sorted(
            k for k in folded if folded[k] != session.state.get(k)
        )
        out.append(
            Violation(
                "state-not-fold",
                session.id,
                f"the state differs from the fold of its state.changed events at keys {keys[:10]}",
            )
        )
    for i, event in enumerate(events):
        task = event.data.get("task")
        if event.type != EventType.STATE_CHANGED or task is None:
            continue
        after = events[i + 1] if i + 1 < len(events) else None
        committed_by = EventType.TOOL_STEP if event.data.get("step") else EventType.TOOL_COMPLETED
        if after is None or after.type != committed_by or after.data.get("task") != task:
            out.append(
                Violation(
                    "state-without-completion",
                    session.id,
                    f"state.changed {event.seq} by task {task} is not followed by its "
                    f"{committed_by.value} (next: {after.type if after else 'nothing'})",
                )
            )
    return out


def _lease_live(session: SessionRecord, now: float) -> bool:
    return session.lease.owner is not None and session.lease.expires_at > now


def _check_events(session: SessionRecord, events: Sequence[EventRecord]) -> list[Violation]:
    out = []
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        missing = sorted(set(range(1, (max(seqs) if seqs else 0) + 1)) - set(seqs))
        out.append(Violation("event-gap", session.id, f"missing event seqs {missing[:10]}"))
    if session.next_event_seq != len(seqs) + 1:
        out.append(
            Violation(
                "event-cursor",
                session.id,
                f"next_event_seq is {session.next_event_seq} but {len(seqs)} events exist",
            )
        )
    return out


def _check_submissions(
    view: ReadView,
    session: SessionRecord,
    subs: Sequence[SubmissionRecord],
    events: Sequence[EventRecord],
    now: float,
    at_rest: bool,
) -> list[Violation]:
    out = []
    settle_events: dict[str, list[str]] = defaultdict(list)
    for event in events:
        if event.type in SETTLED_EVENTS:
            outcome = SETTLED_OUTCOME[EventType(event.type)]
            settle_events[str(event.data.get("submission"))].append(outcome)
    unsettled = [s for s in subs if s.status not in _SETTLED]
    for sub in subs:
        outcomes = settle_events.get(sub.id, [])
        if sub.status in _SETTLED:
            if outcomes != [sub.status.value]:
                out.append(
                    Violation(
                        "settled-not-once",
                        session.id,
                        f"submission {sub.id} is {sub.status} but settle events say {outcomes}",
                    )
                )
            turn = view.get_turn(sub.id)
            if turn is not None and turn.status != _TURN_FOR[sub.status]:
                out.append(
                    Violation(
                        "turn-mismatch",
                        session.id,
                        f"submission {sub.id} is {sub.status}, its turn {turn.status}",
                    )
                )
        elif outcomes:
            out.append(Violation("settle-event-unsettled", session.id, f"{sub.id} has {outcomes}"))
        running = [a for a in view.attempts(sub.id) if a.status == AttemptStatus.RUNNING]
        if len(running) > 1 or (running and sub.status in _SETTLED):
            out.append(
                Violation(
                    "attempt-running",
                    session.id,
                    f"submission {sub.id} ({sub.status}) has {len(running)} running attempts",
                )
            )
    expected = SessionStatus.ACTIVE if unsettled else SessionStatus.IDLE
    if session.status != expected:
        out.append(
            Violation(
                "session-status",
                session.id,
                f"status {session.status} with {len(unsettled)} unsettled submissions",
            )
        )
    # A turn waiting for a person's answer is at rest: no worker can settle it before then.
    unsettled = [s for s in unsettled if not waits_for_input(s)]
    if unsettled and at_rest:
        out.append(
            Violation(
                "unsettled-at-rest",
                session.id,
                f"{len(unsettled)} submissions never settled: {[s.id for s in unsettled]}",
            )
        )
    return out


def _check_steps(
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


def _check_subagents(
    view: ReadView, session: SessionRecord, tasks: Sequence[ToolTaskRecord]
) -> list[Violation]:
    """Subagents (``fx.subagent``): a child names a parent call that names it back; a call has
    at most one child, at the id its execution id derives, with one submission at the
    derived request id; a call that completed returns its child's final text, one that
    failed names its child."""
    out: list[Violation] = []
    if session.parent_task is not None:
        parent = view.get_tool_task(session.parent_task)
        if (
            parent is None
            or parent.session_id != session.parent_session
            or parent.child_session != session.id
        ):
            out.append(
                Violation(
                    "subagent-orphan",
                    session.id,
                    f"parent call {session.parent_session}:{session.parent_task} does not name it",
                )
            )
    for task in tasks:
        if task.child_session is None:
            continue
        expected = child_session_id(task.session_id, task.execution_id)
        child = view.get_session(task.child_session)
        if task.child_session != expected or child is None or not _names(view, child, task):
            out.append(
                Violation(
                    "subagent-child-mismatch",
                    session.id,
                    f"{task.id} names child {task.child_session}, expected {expected} naming it",
                )
            )
            continue
        subs = view.submissions(child.id)
        if [s.request_id for s in subs] != [child_request_id(task.execution_id)]:
            out.append(
                Violation(
                    "subagent-submissions",
                    session.id,
                    f"{task.id}: child {child.id} has {len(subs)} submissions, expected one",
                )
            )
            continue
        out += _check_subagent_result(session, task, subs[0])
    return out


def _names(view: ReadView, child: SessionRecord, task: ToolTaskRecord) -> bool:
    """Whether ``child`` names ``task`` as its parent call. A fork's copy of a call shares its
    source's child (nothing ran again), which names the call that ran it: the same
    execution, under the source's task id."""
    if child.parent_task == task.id:
        return True
    if child.parent_task is None or not is_fork_copy(task.turn_id, task.session_id):
        return False
    ran = view.get_tool_task(child.parent_task)
    return (
        ran is not None
        and ran.execution_id == task.execution_id
        and ran.child_session == task.child_session
    )


def _check_subagent_result(
    session: SessionRecord, task: ToolTaskRecord, child: SubmissionRecord
) -> list[Violation]:
    if task.status == ToolTaskStatus.COMPLETED and (
        child.status != SubmissionStatus.COMPLETED or task.result != (child.result_text or "")
    ):
        detail = f"{task.id} completed with a result that is not child {child.session_id}'s answer"
        return [Violation("subagent-result", session.id, detail)]
    if task.status == ToolTaskStatus.FAILED and child.session_id not in (task.result or ""):
        detail = f"{task.id} failed without naming its child {child.session_id}"
        return [Violation("subagent-result", session.id, detail)]
    return []
