"""Sans-I/O: from what the records prove, decide the turn's next action (DESIGN §4).

Pure functions over records, so every recovery case is testable without a model, a tool or a
store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from fxdurable.core.codec import dumps
from fxdurable.core.records import ModelCallRecord, ToolTaskRecord, TurnRecord
from fxdurable.core.states import ToolTaskStatus, is_terminal

__all__ = [
    "Action",
    "CallModel",
    "Complete",
    "RecoverTool",
    "RunTool",
    "canonical_arguments",
    "is_blind_repeat",
    "next_action",
    "unknown_message",
]


@dataclass(frozen=True, slots=True)
class CallModel:
    round: int


@dataclass(frozen=True, slots=True)
class RunTool:
    task: ToolTaskRecord  # pending: the intent was never committed; run it normally


@dataclass(frozen=True, slots=True)
class RecoverTool:
    task: ToolTaskRecord  # running: a crash interrupted it; the replay policy decides


@dataclass(frozen=True, slots=True)
class Complete:
    text: str


Action: TypeAlias = CallModel | RunTool | RecoverTool | Complete


def next_action(
    turn: TurnRecord,
    last_call: ModelCallRecord | None,
    tasks: Sequence[ToolTaskRecord],
    *,
    steering_pending: bool = False,
) -> Action:
    """``last_call`` is the turn's latest recorded model call; ``tasks`` are its tool tasks.

    Steering that arrived after the model's final answer earns the model another round: the
    answer it gave did not take the steering into account.
    """
    if turn.rounds == 0 or last_call is None:
        return CallModel(0)
    for task in sorted(tasks, key=lambda t: t.index):
        if task.status == ToolTaskStatus.PENDING:
            return RunTool(task)
        if task.status == ToolTaskStatus.RUNNING:
            return RecoverTool(task)
        assert is_terminal(task.status)
    if not last_call.tool_calls and not steering_pending:
        return Complete(last_call.text)
    return CallModel(turn.rounds)


def unknown_message(tool: str) -> str:
    """What the model reads for a call whose outcome is unknown (DESIGN §3.5)."""
    return (
        f"The previous `{tool}` operation was interrupted; it may or may not have completed. "
        "Do not repeat it blindly; inspect the current system state before deciding."
    )


def refusal_message(tool: str) -> str:
    return (
        f"Refused: this repeats the `{tool}` call whose outcome is unknown. "
        + unknown_message(tool)
        + " If you have checked and still want it, ask for the same call again."
    )


def canonical_arguments(arguments: str) -> str:
    """The JSON text with sorted keys and no spacing, so equal JSON compares equal (the text
    itself if it is not JSON)."""
    try:
        return dumps(json.loads(arguments))
    except json.JSONDecodeError:
        return arguments.strip()


def is_blind_repeat(
    task: ToolTaskRecord,
    history: Sequence[ToolTaskRecord],
    canonical: Callable[[str], str] = canonical_arguments,
) -> bool:
    """True if ``task`` repeats an unknown call (same tool, same input) not yet refused once.

    The first repeat after an ``outcome_unknown`` is refused; a deliberate second repeat runs.
    ``history`` is the turn's tool tasks in position order (round, index). ``canonical`` maps
    the arguments of a call of ``task.tool`` to the input they mean (the tool's validated
    input with its defaults: see :meth:`~fxdurable.runtime.tools.Tool.canonical_input`), so
    ``{"tag": "x"}`` repeats ``{"tag": "x", "hold_s": 0.0}`` when ``hold_s`` defaults to 0.
    """
    key = canonical(task.arguments)
    refused_since_unknown: bool | None = None  # None: no unknown call with this key yet
    for earlier in history:
        if earlier.id == task.id:
            break
        if earlier.tool != task.tool or canonical(earlier.arguments) != key:
            continue
        if earlier.status == ToolTaskStatus.OUTCOME_UNKNOWN:
            refused_since_unknown = False
        elif earlier.status == ToolTaskStatus.REFUSED and refused_since_unknown is not None:
            refused_since_unknown = True
    return refused_since_unknown is False
