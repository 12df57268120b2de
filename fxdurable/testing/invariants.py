"""The crash invariants of DESIGN §5, checked from the store (and a log of external effects).

One checker for every store/queue pair: it reads only through :class:`ReadView`. A crash test
runs it after every restart-to-rest; ``fxdurable check`` runs it on a production store.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from fxdurable.core.asking import question_due_at, waits_for_input
from fxdurable.core.events import (
    SETTLED_EVENTS,
    SETTLED_OUTCOME,
    EventType,
)
from fxdurable.core.fork import is_fork_copy
from fxdurable.core.journal._base import ERASE_KEY
from fxdurable.core.records import EventRecord, SessionRecord, SubmissionRecord
from fxdurable.core.session_state import fold_state
from fxdurable.core.states import (
    AttemptStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
)
from fxdurable.core.store import ReadView
from fxdurable.testing.batches import unsafe_overlaps
from fxdurable.testing.questions import check_questions
from fxdurable.testing.step_invariants import SETTLED, Effect, check_effects, check_steps
from fxdurable.testing.subagent_invariants import check_subagents
from fxdurable.testing.violations import Violation

__all__ = ["Effect", "StoreSummary", "Violation", "check_effects", "check_store"]

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


# How long past its timer a question may still wait before ``fxdurable check`` flags it: a
# few scans (``scan_interval_s``, 5 s by default) and a queue's backlog.
EXPIRED_QUESTION_GRACE_S = 300.0


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
        if ERASE_KEY in session.state:
            # An erase began and has not finished (docs/erasure.md): what is left is a subset
            # on purpose. At rest nobody is finishing it: it is to be run again.
            if at_rest:
                violations.append(
                    Violation(
                        "erase-incomplete",
                        session.id,
                        "an erase was interrupted: run `fxdurable erase` on it again to finish",
                    )
                )
            continue
        n_subs += len(subs)
        n_events += len(events)
        session_tasks = view.session_tool_tasks(session.id)
        n_tasks += len(session_tasks)
        request_ids.update(s.request_id for s in subs)
        violations += _check_events(session, events)
        violations += _check_submissions(view, session, subs, events, now, at_rest)
        violations += check_steps(view, session, subs, events, now, at_rest)
        violations += _check_steering(session, events)
        violations += _check_messages(view, session, events)
        violations += check_questions(view, session, subs, events)
        violations += check_subagents(view, session, session_tasks)
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
    unsettled = [s for s in subs if s.status not in SETTLED]
    for sub in subs:
        outcomes = settle_events.get(sub.id, [])
        if sub.status in SETTLED:
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
        if len(running) > 1 or (running and sub.status in SETTLED):
            out.append(
                Violation(
                    "attempt-running",
                    session.id,
                    f"submission {sub.id} ({sub.status}) has {len(running)} running attempts",
                )
            )
    # A settlement webhook still owed keeps the session active: the sweep's index finds it.
    expected = SessionStatus.ACTIVE if unsettled or session.webhooks else SessionStatus.IDLE
    if session.status != expected:
        out.append(
            Violation(
                "session-status",
                session.id,
                f"status {session.status} with {len(unsettled)} unsettled submissions and "
                f"{len(session.webhooks)} webhooks owed",
            )
        )
    # A question past its timer (``ask(timeout_s=)``) is answered by the next worker or scan
    # to look; one still waiting well after is a timer nobody honours (no scan running).
    for sub in unsettled:
        due = question_due_at(sub)
        if due is not None and now - due > EXPIRED_QUESTION_GRACE_S:
            out.append(
                Violation(
                    "question-expired",
                    session.id,
                    f"submission {sub.id} still waits on a question that expired "
                    f"{now - due:.0f}s ago",
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
