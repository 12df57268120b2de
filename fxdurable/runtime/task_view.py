"""What a caller sees of a tool call: the public view of a tool task record.

``progress`` is what the call reported so far (``ctx.progress``), readable while it runs;
once the call settles it is None and ``result`` holds what the model reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from fxdurable.core.records import ToolTaskRecord
from fxdurable.core.states import SubmissionStatus, ToolTaskStatus
from fxdurable.core.store import ReadView

__all__ = ["ToolTask", "running_task"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolTask:
    """One tool call of a turn, as of the moment it was read."""

    id: str
    turn_id: str
    tool: str
    round: int
    index: int
    status: ToolTaskStatus
    progress: str | None  # the tail (4 KB) of its progress reports, while it runs
    progress_at: float | None  # when that progress was written
    result: str | None
    # A subagent call's child session (``fx.subagent``), once admitted: read it by this id.
    child_session: str | None = None

    @classmethod
    def of(cls, record: ToolTaskRecord) -> ToolTask:
        return cls(
            id=record.id,
            turn_id=record.turn_id,
            tool=record.tool,
            round=record.round,
            index=record.index,
            status=record.status,
            progress=record.progress,
            progress_at=record.progress_at,
            result=record.result,
            child_session=record.child_session,
        )


def running_task(view: ReadView, session_id: str) -> ToolTaskRecord | None:
    """The session's tool call in flight, if any: read from the latest round of its running
    turn alone (a session runs one turn at a time, a call runs only in its turn's latest
    round), so the read grows neither with the session's history nor with the turn's: the
    chat stream asks on every idle poll."""
    for sub in view.unsettled_submissions(session_id):
        if sub.status != SubmissionStatus.RUNNING:
            continue
        turn = view.get_turn(sub.id)  # a turn's id is its submission's
        if turn is None or turn.rounds == 0:
            return None
        for task in view.tool_tasks(sub.id, turn.rounds - 1):
            if task.status == ToolTaskStatus.RUNNING:
                return task
    return None
