"""Pure tests of the sans-I/O decisions: what comes next, and what counts as a blind repeat."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fxdurable.core.clock import execution_id, tool_task_id
from fxdurable.core.records import ModelCallRecord, ToolCallRequest, ToolTaskRecord, TurnRecord
from fxdurable.core.states import ModelCallStatus, ToolTaskStatus, TurnStatus
from fxdurable.runtime.decide import (
    CallModel,
    Complete,
    GiveUp,
    RecoverTool,
    RunTool,
    canonical_arguments,
    is_blind_repeat,
    next_action,
    refusal_message,
    unknown_message,
)
from fxdurable.runtime.turn_state import TurnState

K = ToolTaskStatus
TURN = "sub-1"


def turn(rounds: int) -> TurnRecord:
    return TurnRecord(
        id=TURN, session_id="s1", submission_id=TURN, status=TurnStatus.RUNNING, rounds=rounds
    )


def model_call(round_: int, text: str = "", *calls: tuple[str, str]) -> ModelCallRecord:
    return ModelCallRecord(
        turn_id=TURN,
        round=round_,
        status=ModelCallStatus.COMPLETED,
        text=text,
        tool_calls=tuple(ToolCallRequest(name=n, arguments=a) for n, a in calls),
        created_at=0.0,
    )


def task(
    index: int,
    status: ToolTaskStatus,
    *,
    tool: str = "deploy",
    arguments: str = '{"version": "1.4"}',
    round_: int = 0,
    turn_id: str = TURN,
    policy: str = "unsafe",
) -> ToolTaskRecord:
    task_id = tool_task_id(turn_id, round_, index)
    return ToolTaskRecord(
        id=task_id,
        session_id="s1",
        turn_id=turn_id,
        round=round_,
        index=index,
        tool=tool,
        arguments=arguments,
        provider_id=None,
        policy=policy,
        status=status,
        execution_id=execution_id(task_id),
        updated_at=0.0,
    )


# -- next_action -------------------------------------------------------------------------------


def test_a_new_turn_calls_the_model_for_round_zero():
    assert next_action(turn(0), None, []) == CallModel(0)


def test_an_answer_without_tool_calls_completes():
    assert next_action(turn(1), model_call(0, "the answer"), []) == Complete("the answer")
    assert next_action(turn(3), model_call(2, ""), []) == Complete("")


def test_a_pending_task_is_run_normally():
    tasks = [task(0, K.PENDING), task(1, K.PENDING)]
    call = model_call(0, "", ("deploy", "{}"), ("deploy", "{}"))
    assert next_action(turn(1), call, tasks) == RunTool(tasks[0])


def test_a_running_task_is_recovered_by_its_policy():
    tasks = [task(0, K.COMPLETED), task(1, K.RUNNING), task(2, K.PENDING)]
    call = model_call(0, "", *[("deploy", "{}")] * 3)
    assert next_action(turn(1), call, tasks) == RecoverTool(tasks[1])


def test_tasks_are_taken_in_position_order_not_the_order_given():
    tasks = [task(2, K.PENDING), task(1, K.RUNNING), task(0, K.PENDING)]
    call = model_call(0, "", *[("deploy", "{}")] * 3)
    assert next_action(turn(1), call, tasks) == RunTool(tasks[2])
    settled_first = [task(1, K.PENDING), task(0, K.COMPLETED)]
    assert next_action(turn(1), call, settled_first) == RunTool(settled_first[0])


@pytest.mark.parametrize(
    "status", [K.COMPLETED, K.FAILED, K.CANCELLED, K.OUTCOME_UNKNOWN, K.REFUSED]
)
def test_a_settled_round_calls_the_model_for_the_next_round(status):
    tasks = [task(0, K.COMPLETED, round_=2), task(1, status, round_=2)]
    call = model_call(2, "", ("deploy", "{}"), ("deploy", "{}"))
    assert next_action(turn(3), call, tasks) == CallModel(3)


def test_the_text_of_a_round_with_tool_calls_is_not_the_answer():
    call = model_call(0, "let me check", ("lookup", "{}"))
    assert next_action(turn(1), call, [task(0, K.COMPLETED, tool="lookup")]) == CallModel(1)


# -- is_blind_repeat ---------------------------------------------------------------------------


def repeat(*earlier: ToolTaskRecord, **kw: object) -> tuple[ToolTaskRecord, list[ToolTaskRecord]]:
    """A new pending call in the round after ``earlier``; history includes it (as the store's
    session_tool_tasks would)."""
    new = task(0, K.PENDING, round_=len(earlier), **kw)  # type: ignore[arg-type]
    return new, [*earlier, new]


def numbered(status: ToolTaskStatus, round_: int, **kw: object) -> ToolTaskRecord:
    return task(0, status, round_=round_, **kw)  # type: ignore[arg-type]


def test_no_history_is_not_a_repeat():
    new, history = repeat()
    assert not is_blind_repeat(new, history)


def test_first_repeat_of_an_unknown_call_is_blind():
    new, history = repeat(numbered(K.OUTCOME_UNKNOWN, 0))
    assert is_blind_repeat(new, history)


def test_same_input_is_compared_canonically():
    unknown = numbered(K.OUTCOME_UNKNOWN, 0, arguments='{"a": 1, "b": [1, 2]}')
    new, history = repeat(unknown, arguments='{ "b": [1,2],\n  "a": 1 }')
    assert is_blind_repeat(new, history)


def test_different_input_or_tool_is_not_a_repeat():
    unknown = numbered(K.OUTCOME_UNKNOWN, 0)
    new, history = repeat(unknown, arguments='{"version": "1.5"}')
    assert not is_blind_repeat(new, history)
    new, history = repeat(unknown, tool="rollback")
    assert not is_blind_repeat(new, history)


def test_second_repeat_after_a_refusal_runs():
    new, history = repeat(numbered(K.OUTCOME_UNKNOWN, 0), numbered(K.REFUSED, 1))
    assert not is_blind_repeat(new, history)


def test_a_new_unknown_outcome_rearms_the_refusal():
    new, history = repeat(
        numbered(K.OUTCOME_UNKNOWN, 0),
        numbered(K.REFUSED, 1),
        numbered(K.OUTCOME_UNKNOWN, 2),
    )
    assert is_blind_repeat(new, history)


def test_after_the_deliberate_repeat_ran_later_repeats_run():
    new, history = repeat(
        numbered(K.OUTCOME_UNKNOWN, 0), numbered(K.REFUSED, 1), numbered(K.COMPLETED, 2)
    )
    assert not is_blind_repeat(new, history)


@pytest.mark.parametrize("status", [K.COMPLETED, K.FAILED, K.CANCELLED, K.REFUSED])
def test_only_an_unknown_outcome_makes_a_repeat_blind(status):
    new, history = repeat(numbered(status, 0))
    assert not is_blind_repeat(new, history)


def test_calls_after_the_task_in_history_are_ignored():
    new = numbered(K.PENDING, 0)
    later_unknown = numbered(K.OUTCOME_UNKNOWN, 1)
    assert not is_blind_repeat(new, [new, later_unknown])


def test_unknown_calls_of_earlier_turns_count():
    other_turn = task(0, K.OUTCOME_UNKNOWN, turn_id="sub-0")
    new, history = repeat(other_turn)
    assert is_blind_repeat(new, history)


def test_two_repeats_in_one_round_refuse_the_first_and_run_the_second():
    unknown = numbered(K.OUTCOME_UNKNOWN, 0)
    first = task(0, K.REFUSED, round_=1)
    second = task(1, K.PENDING, round_=1)
    assert is_blind_repeat(task(0, K.PENDING, round_=1), [unknown, task(0, K.PENDING, round_=1)])
    assert not is_blind_repeat(second, [unknown, first, second])


# -- messages ----------------------------------------------------------------------------------


def test_unknown_message_says_what_the_contract_says():
    text = unknown_message("deploy")
    assert text == (
        "The previous `deploy` operation was interrupted; it may or may not have completed. "
        "Do not repeat it blindly; inspect the current system state before deciding."
    )


def test_refusal_message_repeats_the_warning_and_says_how_to_insist():
    text = refusal_message("deploy")
    assert text.startswith("Refused")
    assert unknown_message("deploy") in text
    assert "same call again" in text


def test_canonical_arguments():
    assert canonical_arguments('{"b": 1, "a": {"d": 2, "c": 3}}') == '{"a":{"c":3,"d":2},"b":1}'
    assert canonical_arguments("  not json  ") == "not json"
    assert canonical_arguments("{}") == canonical_arguments(" { } ")


def test_the_tool_decides_what_counts_as_the_same_input():
    """``canonical`` stands for the tool's validated input: two texts it maps to one value are
    one call, whatever their spelling."""
    unknown = numbered(K.OUTCOME_UNKNOWN, 0, arguments='{"tag": "x", "hold_s": 0.0}')
    new, history = repeat(unknown, arguments='{"tag": "x"}')
    assert not is_blind_repeat(new, history)  # as raw JSON they differ

    def with_defaults(arguments: str) -> str:
        return canonical_arguments(arguments.replace('"x"}', '"x", "hold_s": 0.0}'))

    assert is_blind_repeat(new, history, with_defaults)


def test_an_answer_the_turn_rejected_is_answered_by_another_model_call() -> None:
    rejected = replace(turn(1), rejected_round=0, output_rejections=1)
    assert next_action(rejected, model_call(0, "not json"), []) == CallModel(1)
    # The answer after the rejection is the turn's answer again (its verdict is the driver's).
    answered = replace(rejected, rounds=2)
    assert next_action(answered, model_call(1, "{}"), []) == Complete("{}")


def test_a_paused_call_is_continued_and_its_text_starts_the_answer() -> None:
    paused = replace(turn(1), pauses_in_row=1, paused_text="Searching.")
    assert next_action(paused, model_call(0, "Searching."), []) == CallModel(1)
    continued = replace(paused, rounds=2, pauses_in_row=0)
    assert next_action(continued, model_call(1, " Found."), []) == Complete("Searching. Found.")


def test_past_max_pauses_in_a_row_the_turn_gives_up() -> None:
    paused = replace(turn(3), pauses_in_row=3, paused_text="abc")
    action = next_action(paused, model_call(2, "c"), [], max_pauses=2)
    assert isinstance(action, GiveUp) and action.code == "model_paused"
    assert next_action(paused, model_call(2, "c"), [], max_pauses=3) == CallModel(3)


# -- the driver's decision over a long round (runtime/turn_state.py) ---------------------------


def _held_round(calls: int) -> TurnState:
    """The driver's state at the start of an attempt whose round asked for ``calls`` calls."""
    from fxdurable.core.journal import AttemptStart
    from fxdurable.core.records import AttemptRecord, SubmissionRecord
    from fxdurable.core.states import AttemptStatus, SubmissionStatus

    submission = SubmissionRecord(
        id=TURN,
        session_id="s1",
        seq=1,
        request_id="r",
        prompt="go",
        status=SubmissionStatus.RUNNING,
        created_at=0.0,
    )
    attempt = AttemptRecord(
        submission_id=TURN, number=1, status=AttemptStatus.RUNNING, worker="w", started_at=0.0
    )
    tasks = tuple(task(i, K.PENDING) for i in reversed(range(calls)))  # not in index order
    call = model_call(0, "", *[("deploy", "{}")] * calls)
    start = AttemptStart(submission, turn(1), attempt, False, last_call=call, tasks=tasks)
    return TurnState.of(start)


def _counting_is_terminal(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import fxdurable.runtime.decide as decide
    import fxdurable.runtime.turn_state as turn_state

    seen = [0]
    real = turn_state.is_terminal

    def counted(status: ToolTaskStatus) -> bool:
        seen[0] += 1
        return real(status)

    monkeypatch.setattr(turn_state, "is_terminal", counted)
    monkeypatch.setattr(decide, "is_terminal", counted)
    return seen


def test_each_call_of_a_long_round_is_decided_from_a_few_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Call after call of a 300-call round, in index order: each decision looks at a handful
    of tasks, never at the settled ones before it (that made a round's cost grow with the
    square of its calls)."""
    state = _held_round(300)
    seen = _counting_is_terminal(monkeypatch)
    for i in range(300):
        seen[0] = 0
        action = state.next_action()
        assert isinstance(action, RunTool) and action.task.index == i
        assert seen[0] <= 3, f"deciding call {i} looked at {seen[0]} tasks"
        state.note(replace(action.task, status=K.COMPLETED))
    assert state.next_action() == CallModel(1)


def test_a_settled_call_started_again_is_decided_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``reuse=False`` read re-run after a crash goes from completed back to running: the
    decision sees it again, although calls after it had settled."""
    state = _held_round(5)
    for t in state.round_tasks[:3]:
        state.note(replace(t, status=K.COMPLETED))
    assert state.next_action() == RunTool(state.round_tasks[3])
    rerun = replace(state.round_tasks[1], status=K.RUNNING)
    state.note(rerun)
    assert state.next_action() == RecoverTool(rerun)
