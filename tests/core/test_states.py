"""The transition tables of every state machine, pinned pair by pair.

The expected tables below are written out literally, independently of ``fxdurable.core.states``:
a careless edit of ``TRANSITIONS`` (a pair added or dropped) fails here, and every pair that is
*not* allowed is checked to raise, so the unhappy paths are tested as much as the happy ones.
"""

from __future__ import annotations

import itertools
from enum import StrEnum

import pytest

from fxdurable.core.states import (
    TRANSITIONS,
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
    advance,
    is_terminal,
)
from fxdurable.errors import IllegalTransitionError, StoreError

MACHINES: dict[str, type[StrEnum]] = {
    "session": SessionStatus,
    "submission": SubmissionStatus,
    "attempt": AttemptStatus,
    "turn": TurnStatus,
    "model_call": ModelCallStatus,
    "tool_task": ToolTaskStatus,
}

# The contract, by value. ``None`` is "no record yet". Keep in step with DESIGN.md §3 on purpose.
EXPECTED: dict[str, dict[str | None, set[str]]] = {
    "session": {
        None: {"idle", "active"},
        "idle": {"active"},
        "active": {"idle"},
    },
    "submission": {
        None: {"queued"},
        "queued": {"running", "aborted"},
        "running": {"completed", "failed", "aborted"},
        "completed": set(),
        "failed": set(),
        "aborted": set(),
    },
    "attempt": {
        None: {"running"},
        "running": {"finished", "yielded", "interrupted"},
        "finished": set(),
        "yielded": set(),
        "interrupted": set(),
    },
    "turn": {
        None: {"running"},
        "running": {"completed", "failed", "aborted"},
        "completed": set(),
        "failed": set(),
        "aborted": set(),
    },
    "model_call": {
        None: {"completed", "failed"},
        "completed": set(),
        "failed": set(),
    },
    "tool_task": {
        None: {"pending"},
        "pending": {"running", "failed", "cancelled", "refused"},
        "running": {"running", "completed", "failed", "cancelled", "outcome_unknown"},
        "completed": {"running"},  # only the reuse=False refresh of a safe read
        "failed": set(),
        "cancelled": set(),
        "outcome_unknown": set(),
        "refused": set(),
    },
}

EXPECTED_TERMINAL: dict[str, set[str]] = {
    "session": set(),
    "submission": {"completed", "failed", "aborted"},
    "attempt": {"finished", "yielded", "interrupted"},
    "turn": {"completed", "failed", "aborted"},
    "model_call": {"completed", "failed"},
    "tool_task": {"completed", "failed", "cancelled", "outcome_unknown", "refused"},
}


def _all_pairs() -> list[tuple[str, StrEnum | None, StrEnum]]:
    pairs: list[tuple[str, StrEnum | None, StrEnum]] = []
    for machine, enum in MACHINES.items():
        currents: list[StrEnum | None] = [None, *enum]
        for current, target in itertools.product(currents, list(enum)):
            pairs.append((machine, current, target))
    return pairs


def _is_expected(machine: str, current: StrEnum | None, target: StrEnum) -> bool:
    key = None if current is None else current.value
    return target.value in EXPECTED[machine][key]


ALL_PAIRS = _all_pairs()
ALLOWED = [p for p in ALL_PAIRS if _is_expected(*p)]
FORBIDDEN = [p for p in ALL_PAIRS if not _is_expected(*p)]


def _pair_id(pair: tuple[str, StrEnum | None, StrEnum]) -> str:
    machine, current, target = pair
    return f"{machine}:{'none' if current is None else current.value}->{target.value}"


def test_every_machine_has_a_table_and_an_enum() -> None:
    assert set(TRANSITIONS) == set(MACHINES) == set(EXPECTED)


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_every_status_has_a_row(machine: str) -> None:
    """A status missing from the table would make every transition out of it illegal."""
    assert set(TRANSITIONS[machine]) == {None, *MACHINES[machine]}
    for current, targets in TRANSITIONS[machine].items():
        assert current is None or isinstance(current, MACHINES[machine])
        for target in targets:
            assert isinstance(target, MACHINES[machine]), (machine, current, target)


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_table_matches_the_contract(machine: str) -> None:
    actual = {
        (None if cur is None else cur.value): {t.value for t in targets}
        for cur, targets in TRANSITIONS[machine].items()
    }
    assert actual == EXPECTED[machine]


def test_pairs_cover_every_combination() -> None:
    expected = sum((len(e) + 1) * len(e) for e in MACHINES.values())
    assert len(ALL_PAIRS) == expected
    assert ALLOWED and FORBIDDEN


@pytest.mark.parametrize("pair", ALLOWED, ids=_pair_id)
def test_allowed_pair_advances(pair: tuple[str, StrEnum | None, StrEnum]) -> None:
    machine, current, target = pair
    result = advance(machine, current, target)
    assert result is target


@pytest.mark.parametrize("pair", FORBIDDEN, ids=_pair_id)
def test_forbidden_pair_raises(pair: tuple[str, StrEnum | None, StrEnum]) -> None:
    machine, current, target = pair
    with pytest.raises(IllegalTransitionError) as info:
        advance(machine, current, target)
    err = info.value
    assert isinstance(err, StoreError)
    assert (err.machine, err.current, err.target) == (machine, current, target)
    assert machine in str(err)
    assert str(target) in str(err)
    assert ("(absent)" if current is None else str(current)) in str(err)


# -- pinned expectations, spelled out so a reader sees the intent ------------------------------


def test_submission_never_leaves_a_terminal_status() -> None:
    with pytest.raises(IllegalTransitionError):
        advance("submission", SubmissionStatus.COMPLETED, SubmissionStatus.RUNNING)
    with pytest.raises(IllegalTransitionError):
        advance("submission", SubmissionStatus.FAILED, SubmissionStatus.COMPLETED)
    with pytest.raises(IllegalTransitionError):
        advance("submission", SubmissionStatus.ABORTED, SubmissionStatus.QUEUED)


def test_submission_never_goes_back_to_queued() -> None:
    """A continuation keeps the submission running and starts a new attempt."""
    with pytest.raises(IllegalTransitionError):
        advance("submission", SubmissionStatus.RUNNING, SubmissionStatus.QUEUED)


def test_submission_queued_cannot_complete_without_running() -> None:
    with pytest.raises(IllegalTransitionError):
        advance("submission", SubmissionStatus.QUEUED, SubmissionStatus.COMPLETED)
    with pytest.raises(IllegalTransitionError):
        advance("submission", SubmissionStatus.QUEUED, SubmissionStatus.FAILED)
    # An abort before the first attempt is the one way out of queued besides running.
    assert advance("submission", SubmissionStatus.QUEUED, SubmissionStatus.ABORTED)


def test_submission_starts_queued_only() -> None:
    assert advance("submission", None, SubmissionStatus.QUEUED) is SubmissionStatus.QUEUED
    with pytest.raises(IllegalTransitionError):
        advance("submission", None, SubmissionStatus.RUNNING)


def test_tool_task_running_to_running_is_a_reexecution() -> None:
    assert advance("tool_task", ToolTaskStatus.RUNNING, ToolTaskStatus.RUNNING)


def test_tool_task_pending_cannot_complete_without_intent() -> None:
    """Write it down before you do it: a result needs a committed intent (running) first."""
    with pytest.raises(IllegalTransitionError):
        advance("tool_task", ToolTaskStatus.PENDING, ToolTaskStatus.COMPLETED)
    with pytest.raises(IllegalTransitionError):
        advance("tool_task", ToolTaskStatus.PENDING, ToolTaskStatus.OUTCOME_UNKNOWN)


def test_tool_task_completed_to_running_is_the_only_way_out_of_a_terminal_task() -> None:
    """completed -> running exists only for the reuse=False refresh; nothing else re-opens."""
    assert advance("tool_task", ToolTaskStatus.COMPLETED, ToolTaskStatus.RUNNING)
    for status in ToolTaskStatus:
        if status is not ToolTaskStatus.RUNNING:
            with pytest.raises(IllegalTransitionError):
                advance("tool_task", ToolTaskStatus.COMPLETED, status)
    for terminal in (
        ToolTaskStatus.FAILED,
        ToolTaskStatus.CANCELLED,
        ToolTaskStatus.OUTCOME_UNKNOWN,
        ToolTaskStatus.REFUSED,
    ):
        with pytest.raises(IllegalTransitionError):
            advance("tool_task", terminal, ToolTaskStatus.RUNNING)


def test_outcome_unknown_only_from_running() -> None:
    """Unknown means an intent was committed: a pending task's outcome is known (not run)."""
    sources = {
        cur
        for cur, targets in TRANSITIONS["tool_task"].items()
        if ToolTaskStatus.OUTCOME_UNKNOWN in targets
    }
    assert sources == {ToolTaskStatus.RUNNING}


def test_refused_only_from_pending() -> None:
    with pytest.raises(IllegalTransitionError):
        advance("tool_task", ToolTaskStatus.RUNNING, ToolTaskStatus.REFUSED)
    assert advance("tool_task", ToolTaskStatus.PENDING, ToolTaskStatus.REFUSED)


def test_attempt_and_turn_are_one_way() -> None:
    with pytest.raises(IllegalTransitionError):
        advance("attempt", AttemptStatus.INTERRUPTED, AttemptStatus.RUNNING)
    with pytest.raises(IllegalTransitionError):
        advance("attempt", AttemptStatus.YIELDED, AttemptStatus.RUNNING)
    with pytest.raises(IllegalTransitionError):
        advance("turn", TurnStatus.COMPLETED, TurnStatus.RUNNING)


def test_session_self_transition_is_not_a_transition() -> None:
    with pytest.raises(IllegalTransitionError):
        advance("session", SessionStatus.IDLE, SessionStatus.IDLE)
    with pytest.raises(IllegalTransitionError):
        advance("session", SessionStatus.ACTIVE, SessionStatus.ACTIVE)


def test_model_call_is_recorded_once_and_never_changes() -> None:
    assert advance("model_call", None, ModelCallStatus.COMPLETED)
    with pytest.raises(IllegalTransitionError):
        advance("model_call", ModelCallStatus.FAILED, ModelCallStatus.COMPLETED)


# -- terminal statuses ---------------------------------------------------------------------


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_is_terminal(machine: str) -> None:
    for status in MACHINES[machine]:
        assert is_terminal(status) == (status.value in EXPECTED_TERMINAL[machine]), status


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_terminal_statuses_have_no_way_out(machine: str) -> None:
    """A terminal status has no outgoing transition, except the tool-task refresh."""
    for status in MACHINES[machine]:
        outgoing = TRANSITIONS[machine][status]
        if is_terminal(status):
            if (machine, status) == ("tool_task", ToolTaskStatus.COMPLETED):
                assert outgoing == {ToolTaskStatus.RUNNING}
            else:
                assert outgoing == frozenset(), status
        elif machine != "session":
            # A status that is not terminal must lead somewhere, or work could wedge in it.
            assert outgoing, status


@pytest.mark.parametrize("machine", [m for m in sorted(MACHINES) if m != "session"])
def test_every_state_can_reach_a_terminal_state(machine: str) -> None:
    """No status is a dead end that is not settled (a wedged record)."""
    table = TRANSITIONS[machine]
    for start in MACHINES[machine]:
        seen: set[StrEnum] = set()
        frontier: list[StrEnum] = [start]
        while frontier:
            status = frontier.pop()
            if status in seen:
                continue
            seen.add(status)
            frontier.extend(table[status])
        assert any(is_terminal(s) for s in seen), (machine, start)


def test_session_is_never_terminal() -> None:
    """A session comes to rest (idle) and accepts the next message; it never ends."""
    assert not any(is_terminal(s) for s in SessionStatus)
