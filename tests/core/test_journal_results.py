"""The step transitions return what their commit wrote as a frozen result (``ModelRound``,
``ToolStep``): equal to what a read after the commit finds, so the driver needs no such read;
and ``finish_tools``, the results of a parallel batch's calls that arrived together in one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import (
    Fence,
    Journal,
    ModelRound,
    ToolResult,
    ToolStep,
    WorkerIdentity,
    Written,
)
from fxdurable.core.records import SessionRecord, ToolCallRequest, ToolTaskRecord, Usage
from fxdurable.core.session_state import MAX_STATE_BYTES, StateWrites
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import IllegalTransitionError, StateTooLargeError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock

HOST = WorkerIdentity(host="host-a", pid=100)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    store = SqliteStore(f"sqlite:///{tmp_path}/results.db")
    yield Journal(store, FakeClock(1_000.0), RandomIds())
    store.close()


def _session(journal: Journal) -> SessionRecord:
    found = journal.read(lambda v: v.get_session("s1"))
    assert found is not None
    return found


def _as_read(journal: Journal, turn_id: str, *, appended: int = 0) -> Written:
    """What the commit's result should say, as a read after it finds it: ``appended``, how
    many of the session's last messages the commit appended."""
    session = _session(journal)
    sub = journal.read(lambda v: v.get_submission(turn_id))
    assert sub is not None
    messages = journal.read(lambda v: v.messages("s1"))
    return Written(
        session_version=session.version,
        steering=session.steering,
        abort_requested=sub.abort_requested,
        state=session.state,
        session=session,
        messages=tuple(messages[len(messages) - appended :]),
    )


def test_each_step_transition_returns_what_a_read_after_its_commit_finds(
    journal: Journal,
) -> None:
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    fence = journal.claim("s1", HOST, ttl_s=30.0)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w1")
    journal.steer("s1", "also this")
    journal.steer("s1", "and that")

    calls = [ToolCallRequest(name=n, arguments="{}") for n in ("plain", "durable")]
    made = journal.record_model_call(
        fence,
        sub.id,
        round_=0,
        text="on it",
        tool_calls=calls,
        policies=["safe", "unsafe"],
        usage=Usage(),
        steering=1,
    )
    assert isinstance(made, ModelRound)
    # The steering entry shown to the model, then the response: what the next request is
    # built from without reading them back.
    assert made.written == _as_read(journal, sub.id, appended=2)
    assert [m.role for m in made.written.messages] == ["user", "assistant"]
    assert made.written.steering == ("and that",)  # the one the model was shown is delivered
    assert made.turn == journal.read(lambda v: v.get_turn(sub.id))
    assert made.model_call == journal.read(lambda v: v.model_calls(sub.id))[-1]
    assert made.tasks == tuple(journal.read(lambda v: v.tool_tasks(sub.id)))

    plain, durable = made.tasks
    steps: list[ToolStep] = [journal.start_tool(fence, plain.id)]
    journal.request_abort("s1")  # the next commit reports the abort intent
    steps.append(journal.start_tool(fence, durable.id, durable=True))
    steps.append(
        journal.record_step(
            fence, durable.id, name="a", value="1", writes=StateWrites(set={"k": 1})
        )
    )
    assert steps[-1].written.state == {"k": 1}
    assert steps[-1].written.abort_requested
    steps.append(
        journal.finish_tool(
            fence, plain.id, ToolTaskStatus.COMPLETED, "ok", writes=StateWrites(set={"j": 2})
        )
    )
    assert steps[-1].written.state == {"k": 1, "j": 2}
    # Each result holds its own commit: the session's version moves on by one per step.
    versions = [s.written.session_version for s in steps]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    for step in steps[-2:]:
        assert step.task == journal.read(lambda v, i=step.task.id: v.get_tool_task(i))
    assert steps[-1].written == _as_read(journal, sub.id)


def _responded(journal: Journal, calls: int) -> tuple[Fence, ModelRound]:
    """A turn whose first response asked for ``calls`` safe calls (``t0``, ``t1``, ...)."""
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    fence = journal.claim("s1", HOST, ttl_s=30.0)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w1")
    made = journal.record_model_call(
        fence,
        sub.id,
        round_=0,
        text="on it",
        tool_calls=[ToolCallRequest(name=f"t{i}", arguments="{}") for i in range(calls)],
        policies=["safe"] * calls,
        usage=Usage(),
    )
    return fence, made


def test_the_results_are_frozen(journal: Journal) -> None:
    fence, made = _responded(journal, 1)
    step = journal.start_tool(fence, made.tasks[0].id)
    for result, field in ((made, "tasks"), (step, "task"), (step.written, "steering")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(result, field, ())


# -- finish_tools: a parallel batch's results that arrived together, one commit ---------------


def _running(journal: Journal, calls: int) -> tuple[Fence, list[ToolTaskRecord]]:
    """A turn whose response asked for ``calls`` safe calls, all started."""
    fence, made = _responded(journal, calls)
    for task in made.tasks:
        journal.start_tool(fence, task.id)
    return fence, list(made.tasks)


def _task(journal: Journal, task_id: str) -> ToolTaskRecord:
    found = journal.read(lambda v: v.get_tool_task(task_id))
    assert found is not None
    return found


def _version(journal: Journal) -> int:
    session = journal.read(lambda v: v.get_session("s1"))
    assert session is not None
    return session.version


def test_results_that_arrived_together_are_one_commit_in_their_order(journal: Journal) -> None:
    fence, (a, b, c) = _running(journal, 3)
    before = _version(journal)
    steps = journal.finish_tools(
        fence,
        [
            ToolResult(c.id, ToolTaskStatus.COMPLETED, "c ok", StateWrites(set={"c": 1})),
            ToolResult(a.id, ToolTaskStatus.FAILED, "a broke"),
        ],
    )
    assert _version(journal) == before + 1  # one commit
    assert [s.task.id for s in steps] == [c.id, a.id]
    assert steps[0].written == steps[1].written  # what the one commit left on the session
    assert steps[1].written.state == {"c": 1}
    assert [_task(journal, t.id).status for t in (a, b, c)] == [
        ToolTaskStatus.FAILED,
        ToolTaskStatus.RUNNING,
        ToolTaskStatus.COMPLETED,
    ]
    assert [s.task for s in steps] == [_task(journal, c.id), _task(journal, a.id)]
    settled = [
        (e.type, e.data["index"])
        for e in journal.read(lambda v: v.events("s1"))
        if e.type in ("tool.completed", "tool.failed")
    ]
    assert settled == [("tool.completed", 2), ("tool.failed", 0)]


def test_one_refused_result_writes_none_of_them(journal: Journal) -> None:
    fence, (a, b) = _running(journal, 2)
    journal.finish_tool(fence, a.id, ToolTaskStatus.COMPLETED, "a ok")
    before = _version(journal)
    with pytest.raises(IllegalTransitionError):
        journal.finish_tools(
            fence,
            [
                ToolResult(b.id, ToolTaskStatus.COMPLETED, "b ok"),
                ToolResult(a.id, ToolTaskStatus.COMPLETED, "a again"),
            ],
        )
    big = "x" * MAX_STATE_BYTES
    with pytest.raises(StateTooLargeError):
        journal.finish_tools(
            fence, [ToolResult(b.id, ToolTaskStatus.COMPLETED, "b", StateWrites(set={"k": big}))]
        )
    assert _version(journal) == before
    assert _task(journal, b.id).status == ToolTaskStatus.RUNNING
    assert _task(journal, a.id).result == "a ok"


def test_no_result_is_refused(journal: Journal) -> None:
    fence, _ = _running(journal, 1)
    with pytest.raises(ValueError, match="no result"):
        journal.finish_tools(fence, [])
