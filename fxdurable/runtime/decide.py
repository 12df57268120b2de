"""Sans-I/O: from what the records prove, decide the turn's next action (DESIGN §4).

Pure functions over records, so every recovery case is testable without a model, a tool or a
store. Two decisions: :func:`next_action` (what the records say comes next) and
:func:`at_boundary` (whether the turn may take that step now: an abort, the attempts budget, the
turn's timeout, the invocation's deadline). The driver gathers the facts and does what they
decide; it checks none of them itself, in the loop or when it starts a call in the crossing of
the commit before it (``TurnDriver._start_next``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from fxdurable.core.codec import dumps
from fxdurable.core.records import ModelCallRecord, ToolTaskRecord, TurnRecord
from fxdurable.core.states import ToolTaskStatus, is_terminal

__all__ = [
    "DEFAULT_MAX_PAUSES",
    "AbortTurn",
    "Action",
    "AskExhausted",
    "Boundary",
    "BoundaryAction",
    "CallModel",
    "Complete",
    "FailTurn",
    "GiveUp",
    "GoOn",
    "RecoverTool",
    "RefreshReads",
    "RunTool",
    "StopInvocation",
    "at_boundary",
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


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The turn cannot go on: settle it failed with ``code`` (a paused turn past its limit)."""

    code: str
    message: str


Action: TypeAlias = CallModel | RunTool | RecoverTool | Complete | GiveUp

# How many paused model calls in a row a turn continues (``Durability.max_pauses``).
DEFAULT_MAX_PAUSES = 8


def next_action(
    turn: TurnRecord,
    last_call: ModelCallRecord | None,
    tasks: Sequence[ToolTaskRecord],
    *,
    steering_pending: bool = False,
    max_pauses: int = DEFAULT_MAX_PAUSES,
) -> Action:
    """``last_call`` is the turn's latest recorded model call; ``tasks`` are its tool tasks.

    Steering that arrived after the model's final answer earns the model another round: the
    answer it gave did not take the steering into account. So does an answer the turn
    rejected (a typed answer that did not validate: the rejection is in the record), and a
    paused response (Anthropic ``pause_turn``), up to ``max_pauses`` in a row. An answer
    that continues paused calls starts with their text.
    """
    if turn.rounds == 0 or last_call is None:
        return CallModel(0)
    for task in sorted(tasks, key=lambda t: t.index):
        if task.status == ToolTaskStatus.PENDING:
            return RunTool(task)
        if task.status == ToolTaskStatus.RUNNING:
            return RecoverTool(task)
        assert is_terminal(task.status)
    if last_call.tool_calls or steering_pending or turn.rejected_round == last_call.round:
        return CallModel(turn.rounds)
    if turn.pauses_in_row > max_pauses:
        return GiveUp(
            "model_paused",
            f"the model paused the turn {turn.pauses_in_row} times in a row (pause_turn); "
            f"the limit is Durability(max_pauses={max_pauses})",
        )
    if turn.pauses_in_row:
        return CallModel(turn.rounds)  # the continuation of the paused response
    return Complete(turn.paused_text + last_call.text)


@dataclass(frozen=True, slots=True, kw_only=True)
class Boundary:
    """What the driver knows at a step boundary, as plain values (no clock, no store)."""

    abort: bool  # an abort intent recorded, or seen by this process
    timed_out: bool  # the turn ran past ``timeout_s`` since it started
    timeout_s: float
    stop_reason: str | None  # the invocation budget's (``InvocationBudget.stop_reason``)
    # The first boundary of an attempt also checks the attempts budget and recovery's reads.
    first: bool = False
    recovered: bool = False  # the attempt took over from a crashed one
    interruptions: int = 0
    max_attempts: int = 1
    on_exhausted: Literal["fail", "ask"] = "fail"
    denied: str | None = None  # a person's reason for denying an exhausted turn
    # The spending limit the turn has reached (runtime/spend.py: ``overspent``), if any.
    overspent: str | None = None
    on_overspent: Literal["fail", "ask"] = "fail"
    spend_denied: str | None = None  # a person's reason for denying an overspent turn
    # Its question expired with ``on_timeout="fail"`` (the message), if it did.
    question_failed: str | None = None


@dataclass(frozen=True, slots=True)
class GoOn:
    """Take the step."""


@dataclass(frozen=True, slots=True)
class AbortTurn:
    """Settle the submission ``aborted`` (its running calls resolved first)."""


@dataclass(frozen=True, slots=True)
class FailTurn:
    code: str
    message: str
    exhausted: Literal["attempts_exhausted", "time_exhausted", "budget_exhausted"]


@dataclass(frozen=True, slots=True)
class AskExhausted:
    """Ask a person whether an exhausted turn may go on (``on_exhausted="ask"``): its
    attempts (``about="exhausted"``) or its spending budget (``about="budget"``)."""

    question: str
    about: Literal["exhausted", "budget"] = "exhausted"


@dataclass(frozen=True, slots=True)
class RefreshReads:
    """Re-run the interrupted round's ``reuse=False`` reads, then decide again."""


@dataclass(frozen=True, slots=True)
class StopInvocation:
    """Stop this invocation (``Suspend``) with a continuation: its deadline, not the turn's."""

    reason: str


BoundaryAction: TypeAlias = (
    GoOn | AbortTurn | FailTurn | AskExhausted | RefreshReads | StopInvocation
)


def at_boundary(b: Boundary) -> BoundaryAction:
    """Whether the turn may take its next step. In order: an abort intent wins over every
    budget (DESIGN §3.8); at an attempt's first boundary, a person's deny, then the attempts
    budget, then recovery's stale reads; the spending budget; the turn's timeout; the
    invocation's deadline.
    A step the records prove finished (:class:`Complete`) is decided before this: finished
    work is never discarded by an abort or a spent budget (DESIGN §4)."""
    if b.abort:
        return AbortTurn()
    if b.question_failed is not None:
        return FailTurn("question_timeout", b.question_failed, "time_exhausted")
    if b.first:
        if b.denied is not None:
            return FailTurn(
                "attempts_exhausted",
                f"interrupted {b.interruptions} times; a person denied going on: {b.denied}",
                "attempts_exhausted",
            )
        if b.interruptions >= b.max_attempts:
            if b.on_exhausted == "ask":
                return AskExhausted(
                    f"This turn was interrupted {b.interruptions} times, which spends its "
                    f"budget of {b.max_attempts} attempts. Try again with a fresh budget "
                    "(allow), or let it fail (deny)?"
                )
            return FailTurn(
                "attempts_exhausted",
                f"interrupted {b.interruptions} times; the budget is {b.max_attempts} attempts",
                "attempts_exhausted",
            )
        if b.recovered:
            return RefreshReads()
    if b.overspent is not None:
        if b.spend_denied is not None:
            return FailTurn(
                "budget_exhausted",
                f"{b.overspent}; a person denied going on: {b.spend_denied}",
                "budget_exhausted",
            )
        if b.on_overspent == "ask":
            return AskExhausted(
                f"The {b.overspent}. Grant it one more budget of the same size (allow), or "
                "let it fail (deny)?",
                about="budget",
            )
        return FailTurn("budget_exhausted", b.overspent, "budget_exhausted")
    if b.timed_out:
        return FailTurn(
            "timeout", f"the turn ran past its {b.timeout_s:g}s budget", "time_exhausted"
        )
    if b.stop_reason is not None:
        return StopInvocation(b.stop_reason)
    return GoOn()


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
