"""Invariants of the questions a turn asks a person (``needs_input``), for ``check_store``.

- ``question-open-mismatch``: a submission whose latest question has no answer (it waits,
  or an abort settled it while it waited) has exactly one open question (one
  ``input.requested`` more than ``input.answered``); any other has none.
- ``waiting-attempt-running``: a waiting submission holds no running attempt (the question's
  transaction ended it).
- ``waiting-call-started``: the call a waiting question is about has no run: it is
  ``pending``, with no intent recorded, so nothing about it can be unknown.
- ``answer-without-question``: every ``input.answered`` follows an ``input.requested`` of the
  same submission and call, with no answer in between; ``question-asked-twice``: no question
  is asked while another is open.
- ``answer-without-event``: a call carrying an answer has its ``input.answered`` event.

A turn that waits because its attempts ran out (``on_exhausted="ask"``) may hold a call its
last crash left ``running``: that is recovery's evidence, settled by the call's replay policy
once the answer comes (``check_store`` does not count it as left running).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from fxdurable.core.asking import waits_for_input
from fxdurable.core.events import EventType
from fxdurable.core.records import EventRecord, SessionRecord, SubmissionRecord
from fxdurable.core.states import AttemptStatus, ToolTaskStatus
from fxdurable.core.store import ReadView
from fxdurable.testing.violations import Violation

__all__ = ["check_questions"]


def check_questions(
    view: ReadView,
    session: SessionRecord,
    subs: Sequence[SubmissionRecord],
    events: Sequence[EventRecord],
) -> list[Violation]:
    out: list[Violation] = []
    open_: dict[str, str | None] = {}  # submission -> the task its open question is about
    answered_tasks: Counter[str] = Counter()
    open_count: Counter[str] = Counter()
    for event in events:
        sub_id = event.turn_id or ""
        if event.type == EventType.INPUT_REQUESTED:
            if sub_id in open_:
                out.append(
                    Violation("question-asked-twice", session.id, f"{sub_id} at event {event.seq}")
                )
            open_[sub_id] = _task(event)
            open_count[sub_id] += 1
        elif event.type == EventType.INPUT_ANSWERED:
            if sub_id not in open_ or open_[sub_id] != _task(event):
                out.append(
                    Violation(
                        "answer-without-question",
                        session.id,
                        f"event {event.seq} answers {_task(event) or 'the budget'} of {sub_id}, "
                        "which has no such open question",
                    )
                )
            open_.pop(sub_id, None)
            open_count[sub_id] -= 1
            task = _task(event)
            if task is not None:
                answered_tasks[task] += 1
    for sub in subs:
        # The record's latest question is open until answered; an abort may settle the
        # submission while it waits, leaving it open for good.
        request = sub.input_request
        expected = int(request is not None and request.answer is None)
        if open_count[sub.id] != expected:
            out.append(
                Violation(
                    "question-open-mismatch",
                    session.id,
                    f"submission {sub.id} ({sub.status}) has {open_count[sub.id]} open "
                    f"questions; its record says {expected}",
                )
            )
        if waits_for_input(sub):
            out.extend(_check_waiting(view, session, sub))
        for call in view.tool_tasks(sub.id) if request is not None else ():
            if call.answer is not None and answered_tasks[call.id] != 1:
                out.append(
                    Violation(
                        "answer-without-event",
                        session.id,
                        f"tool task {call.id} carries an answer and has "
                        f"{answered_tasks[call.id]} input.answered events",
                    )
                )
    return out


def _check_waiting(
    view: ReadView, session: SessionRecord, sub: SubmissionRecord
) -> list[Violation]:
    out: list[Violation] = []
    if any(a.status == AttemptStatus.RUNNING for a in view.attempts(sub.id)):
        out.append(
            Violation(
                "waiting-attempt-running",
                session.id,
                f"submission {sub.id} waits for input with an attempt running",
            )
        )
    request = sub.input_request
    task = (
        None if request is None or request.task_id is None else view.get_tool_task(request.task_id)
    )
    if task is not None and (task.status != ToolTaskStatus.PENDING or task.runs):
        out.append(
            Violation(
                "waiting-call-started",
                session.id,
                f"tool task {task.id} ({task.tool}) is {task.status} after {task.runs} runs "
                "while its question waits",
            )
        )
    return out


def _task(event: EventRecord) -> str | None:
    task = event.data.get("task")
    return task if isinstance(task, str) else None
