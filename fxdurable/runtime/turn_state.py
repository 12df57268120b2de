"""What the turn driver holds of its turn between steps (see :mod:`fxdurable.runtime.turn`).

Read once per attempt (``begin_attempt`` returns it) and then kept up to date from what each
of the driver's own transitions hands back, so no step reads it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pydantic

from fxdurable.core.codec import JsonObject
from fxdurable.core.journal import AttemptStart, Held, ModelRound, ToolStep
from fxdurable.core.records import (
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
    TurnRecord,
)
from fxdurable.core.states import ToolTaskStatus, is_terminal
from fxdurable.runtime.decide import DEFAULT_MAX_PAUSES, Action, next_action
from fxdurable.runtime.tools import Tool

__all__ = ["ReadyTool", "TurnState"]

# A round appends its response and the steering shown with it: a few are enough to bring a
# held conversation up to date; an older gap is read from the store.
_OWN_MESSAGES = 32


@dataclass(slots=True)
class TurnState:
    """The turn as the driver's own commits left it: read once per attempt, then kept."""

    submission: SubmissionRecord
    turn: TurnRecord
    last_call: ModelCallRecord | None
    tasks: dict[str, ToolTaskRecord]  # the turn's tool tasks by id, in (round, index) order
    steering: tuple[str, ...]
    round_ids: list[str] = field(default_factory=list)  # the latest round's, by index
    # round_ids[:settled_upto] are settled: a step's decision starts from the first call
    # after them, so it costs the same at a round's 100th call as at its first.
    settled_upto: int = 0
    round_positions: dict[str, int] = field(default_factory=dict)  # task id -> its index there
    abort_requested: bool = False
    unknown_tools: set[str] = field(default_factory=set)  # tools with an unknown outcome
    # The session's persisted state as the latest commit left it (every tool call's intent
    # is such a commit): what the next call's ``ctx.state`` starts from.
    session_state: JsonObject = field(default_factory=dict)
    # The session row as the latest commit wrote it: the next transition writes from it
    # (``held``) instead of reading it. None until the attempt's first step commits.
    session: SessionRecord | None = None
    # The messages the driver's latest commits appended, oldest first (at most
    # ``_OWN_MESSAGES``): with ``session``, what its next model request is built from without
    # reading them back (runtime/held_view.py).
    own_messages: list[MessageRecord] = field(default_factory=list)

    @classmethod
    def of(cls, start: AttemptStart, *, max_pauses: int = DEFAULT_MAX_PAUSES) -> TurnState:
        state = cls(
            max_pauses=max_pauses,
            submission=start.submission,
            turn=start.turn,
            last_call=start.last_call,
            tasks={},
            steering=start.steering,
            abort_requested=start.submission.abort_requested,
        )
        last_round = start.last_call.round if start.last_call is not None else None
        for task in start.tasks:
            state.note(task)
        state._begin_round([t for t in start.tasks if t.round == last_round])
        return state

    @property
    def round_tasks(self) -> list[ToolTaskRecord]:
        """The tool tasks of the latest recorded model call."""
        return [self.tasks[i] for i in self.round_ids]

    def open_round_tasks(self) -> list[ToolTaskRecord]:
        """The latest round's tasks from its first unsettled one on, by index (settled ones
        after it included): what a parallel batch is chosen from."""
        return [self.tasks[i] for i in self.round_ids[self.settled_upto :]]

    def _first_open_task(self) -> list[ToolTaskRecord]:
        """The round's first unsettled task, or none."""
        ids = self.round_ids
        return [self.tasks[ids[self.settled_upto]]] if self.settled_upto < len(ids) else []

    def _settle_upto(self, position: int) -> None:
        """``round_ids[:position]`` are settled: move the mark past every settled one from
        there on (called as each task is noted, so the mark is always as far as it goes)."""
        ids = self.round_ids
        while position < len(ids) and is_terminal(self.tasks[ids[position]].status):
            position += 1
        self.settled_upto = position

    def _begin_round(self, tasks: list[ToolTaskRecord]) -> None:
        self.round_ids = [t.id for t in sorted(tasks, key=lambda t: t.index)]
        self.round_positions = {task_id: i for i, task_id in enumerate(self.round_ids)}
        self._settle_upto(0)

    # Paused model calls in a row the turn continues (``Durability.max_pauses``).
    max_pauses: int = DEFAULT_MAX_PAUSES

    def next_action(self) -> Action:
        # The first unsettled task decides; the settled ones before it only prove the order.
        return next_action(
            self.turn,
            self.last_call,
            self._first_open_task(),
            steering_pending=bool(self.steering),
            max_pauses=self.max_pauses,
        )

    def note(self, task: ToolTaskRecord) -> None:
        self.tasks[task.id] = task
        if task.status == ToolTaskStatus.OUTCOME_UNKNOWN:
            self.unknown_tools.add(task.tool)
        position = self.round_positions.get(task.id)
        if position is None:
            return  # not a task of the latest round
        if position < self.settled_upto and not is_terminal(task.status):
            self.settled_upto = position  # a settled read started again (reuse=False)
        elif position == self.settled_upto:
            self._settle_upto(position)

    def noted(self, step: ToolStep | ModelRound) -> None:
        """Keep what one of the driver's own transitions committed (its frozen result): the
        session as the commit left it, and the task, or the model round and its tasks."""
        written = step.written
        self.steering = written.steering
        self.abort_requested = self.abort_requested or written.abort_requested
        self.session_state = written.state
        if written.session is not None:
            self.session = written.session
        if written.messages:
            self.own_messages += written.messages
            del self.own_messages[:-_OWN_MESSAGES]
        if isinstance(step, ToolStep):
            self.note(step.task)
        else:
            self.turn = step.turn
            self.last_call = step.model_call
            for task in step.tasks:
                self.note(task)
            self._begin_round(list(step.tasks))
        if step.started is not None:  # the next call's intent, in the same commit
            self.note(step.started.task)

    def peeked(self, step: ToolStep | ModelRound) -> TurnState:
        """The turn as ``step`` (a commit not made yet) would leave it; this one unchanged."""
        peek = replace(
            self,
            tasks=dict(self.tasks),
            round_ids=list(self.round_ids),
            unknown_tools=set(self.unknown_tools),
            own_messages=list(self.own_messages),
        )
        peek.noted(step)
        return peek

    def held(self) -> Held | None:
        """What the driver's next transition may write from without reading it again: the
        records its own commits wrote (the session, the turn, the submission, the tasks).
        Stale ones (another writer came first) only cost a fallback to the ordinary read."""
        if self.session is None:
            return None
        return Held(self.session, self.submission, self.turn, self.tasks)


@dataclass(frozen=True, slots=True)
class ReadyTool:
    """A tool step ready to run: its arguments parsed, nothing to refuse or deny first."""

    task: ToolTaskRecord
    tool: Tool
    arguments: pydantic.BaseModel
