"""What a fork copies: a session's conversation as it was after one of its events.

Every step is recorded together with the event that announces it, so any recorded step (a
user message, a model reply, a tool result, a compaction) is a point to fork after, named by
its event cursor. A submission id names the event that settled it. The conversation as of
cursor ``N`` is:

- the source's messages with ``cursor <= N``: a prefix of its message seqs, because cursors
  grow with seqs. They keep their seqs, so a compaction summary among them still stands for
  the same messages, and the fork's ``compacted_upto`` is the latest copied summary's;
- the persisted state (``ctx.state``) as of ``N``: the fold of the source's ``state.changed``
  events up to it (:func:`~fxdurable.core.session_state.fold_state`), which the fork records
  as its own first ``state.changed`` (so its state, too, is the fold of its events);
- the tool results settled by ``N``, with the status and result their settle event recorded
  (a later refresh of a ``reuse=False`` read does not leak into an earlier point). A call the
  model asked for that was not settled by ``N`` is left out, together with its entry in the
  reply's tool calls: the fork holds no unsettled work, and no provider accepts a call
  without its result.

What is copied depends on the point alone, not on when the fork reads: a message or a result
recorded after the point is told apart by its cursor or its event, so a source whose turn runs
on meanwhile (or a store whose reads are not one snapshot) gives the same copy.

A message recorded before forks existed carries no cursor: it is taken when the submission of
its turn had settled by ``N`` (so forking after a settled submission is exact for old data
too; a point inside an old turn takes none of that turn's messages).

Copies belong to the fork: their turn id is the source turn's with ``@<fork id>`` after it (a
turn id names one session's records everywhere: indexes and task ids derive from it), and
tool tasks keep the source's ``execution_id``, since they are that execution's results, and the
call id the source's model saw (its ``provider_id``, else the source task's id).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fxdurable.core.clock import tool_task_id
from fxdurable.core.codec import JsonValue
from fxdurable.core.events import (
    SETTLED_EVENTS,
    TOOL_SETTLED_EVENTS,
    EventType,
    tool_settled_event,
)
from fxdurable.core.records import MessageRecord, SessionRecord, ToolTaskRecord
from fxdurable.core.session_state import fold_state
from fxdurable.core.states import ToolTaskStatus, is_terminal
from fxdurable.core.store import ReadView
from fxdurable.errors import ForkPointError

__all__ = [
    "ForkCopy",
    "ForkPoint",
    "fork_copy",
    "fork_point",
    "fork_turn_id",
    "is_fork_copy",
]

# A submission id, an event cursor of the source, or None: everything recorded so far.
ForkPoint = str | int | None

# The terminal status each tool settle event records.
_STATUS_OF_EVENT = {tool_settled_event(s).value: s for s in ToolTaskStatus if is_terminal(s)}


@dataclass(frozen=True, slots=True)
class ForkCopy:
    messages: tuple[MessageRecord, ...]  # for the fork, seqs 1..n
    tasks: tuple[ToolTaskRecord, ...]  # for the fork, every one settled
    compacted_upto: int
    state: dict[str, JsonValue]  # the source's persisted state as of the point


def fork_turn_id(turn_id: str, fork_id: str) -> str:
    """The fork's id for a turn of its source: unique, and readable in a trace."""
    return f"{turn_id}@{fork_id}"


def is_fork_copy(turn_id: str, session_id: str) -> bool:
    """Whether records of ``turn_id`` in ``session_id`` were copied there by a fork: their
    events (a tool's outcome, a model call's completion) are the source's, not the fork's."""
    return turn_id.endswith(f"@{session_id}")


def fork_point(view: ReadView, source: SessionRecord, after: ForkPoint) -> int:
    """The event cursor of the source that ``after`` names; :class:`ForkPointError` if none."""
    last = source.next_event_seq - 1
    if after is None:
        return last
    if isinstance(after, bool) or not isinstance(after, int | str):
        raise ForkPointError(f"after= takes a submission id or an event cursor, not {after!r}")
    if isinstance(after, int):
        if not 1 <= after <= last:
            raise ForkPointError(f"the session has events 1..{last}; there is no event {after}")
        (event,) = view.events(source.id, after=after - 1, limit=1)
        if event.type == EventType.STATE_CHANGED and event.data.get("task") is not None:
            # A call's state change is written just before its result (or step) event, in one
            # transaction: they are one step, and the point is that step's event.
            return after + 1
        return after
    sub = view.get_submission(after)
    if sub is None or sub.session_id != source.id:
        raise ForkPointError(f"the session has no submission {after!r}")
    for event in view.events(source.id, after=sub.cursor):
        if event.type in SETTLED_EVENTS and event.data.get("submission") == sub.id:
            return event.seq
    raise ForkPointError(
        f"submission {after!r} has not settled yet ({sub.status}); fork after it once it "
        "settles, or after one of its recorded steps by event cursor"
    )


def fork_copy(view: ReadView, source: SessionRecord, after: int, fork_id: str) -> ForkCopy:
    """The source's conversation as of event ``after``, as records of the session ``fork_id``."""
    events = view.events(source.id, limit=after)
    settled_turns = {str(e.data.get("submission")) for e in events if e.type in SETTLED_EVENTS}
    settled_at: dict[str, tuple[ToolTaskStatus, str]] = {}
    for event in events:
        if event.type in TOOL_SETTLED_EVENTS:
            status = _STATUS_OF_EVENT[event.type]
            settled_at[str(event.data.get("task"))] = (status, str(event.data.get("result", "")))
    messages: list[MessageRecord] = []
    tasks: list[ToolTaskRecord] = []
    compacted_upto = 0
    # Every task of the session in one read (a range, paginated), not one read per round: a
    # long session has thousands of rounds, and on DynamoDB each read is a request.
    by_round: dict[tuple[str, int], list[ToolTaskRecord]] = {}
    for task in view.session_tool_tasks(source.id):
        by_round.setdefault((task.turn_id, task.round), []).append(task)
    for message in view.messages(source.id):
        if not _recorded_by(message, after, settled_turns):
            break  # cursors grow with seqs: nothing later is either
        turn_id = fork_turn_id(message.turn_id, fork_id)
        tool_calls = message.tool_calls
        round_tasks = by_round.get((message.turn_id, message.round or 0), ()) if tool_calls else ()
        if round_tasks:
            kept = [t for t in round_tasks if _settled_by(t, settled_at, settled_turns) is not None]
            tool_calls = tuple(tool_calls[t.index] for t in kept if t.index < len(tool_calls))
            for task in kept:
                status, result = _settled_by(task, settled_at, settled_turns) or (task.status, "")
                tasks.append(
                    replace(
                        task,
                        id=tool_task_id(turn_id, task.round, task.index),
                        # The call id the source's model saw: the fork's conversation is the
                        # source's, byte for byte (a provider's prompt cache still applies).
                        provider_id=task.provider_id or task.id,
                        session_id=fork_id,
                        turn_id=turn_id,
                        status=status,
                        result=result,
                        progress=None,  # a settled call has none (the result replaced it)
                        progress_at=None,
                        version=1,
                    )
                )
        messages.append(
            replace(message, session_id=fork_id, turn_id=turn_id, tool_calls=tool_calls, cursor=1)
        )
        if message.role == "summary":
            compacted_upto = max(compacted_upto, message.summarizes_upto or 0)
    return ForkCopy(
        messages=tuple(messages),
        tasks=tuple(tasks),
        compacted_upto=compacted_upto,
        state=fold_state(events),
    )


def _recorded_by(message: MessageRecord, after: int, settled_turns: set[str]) -> bool:
    if message.cursor is None:  # recorded before forks existed
        return message.turn_id in settled_turns
    return message.cursor <= after


def _settled_by(
    task: ToolTaskRecord,
    settled_at: dict[str, tuple[ToolTaskStatus, str]],
    settled_turns: set[str],
) -> tuple[ToolTaskStatus, str] | None:
    """The task's status and result as of the point, or None while it was unsettled there.
    A pending task cancelled by its submission's settlement has no event of its own: it
    settled with the submission. A task a fork copied (forking a fork) has none either: it
    was settled from the fork's first event on."""
    if task.id in settled_at:
        return settled_at[task.id]
    copied = is_fork_copy(task.turn_id, task.session_id)  # settled when its fork was made
    if is_terminal(task.status) and (copied or task.turn_id in settled_turns):
        return task.status, task.result or ""
    return None
