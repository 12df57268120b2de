"""The invariants of subagents (``fx.subagent``): parents and children name each other, and a
call's result is its child's. Part of :mod:`fxdurable.testing.invariants`.
"""

from __future__ import annotations

from collections.abc import Sequence

from fxdurable.core.fork import is_fork_copy
from fxdurable.core.records import SessionRecord, SubmissionRecord, ToolTaskRecord
from fxdurable.core.states import (
    SubmissionStatus,
    ToolTaskStatus,
)
from fxdurable.core.store import ReadView
from fxdurable.core.subagent import child_request_id, child_session_id
from fxdurable.testing.violations import Violation

__all__ = ["check_subagents"]


def check_subagents(
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
