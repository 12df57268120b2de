"""``finish_tools``: the results of a parallel batch's calls that arrived together, one commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Fence, Journal, ToolResult, WorkerIdentity
from fxdurable.core.records import ToolCallRequest, ToolTaskRecord, Usage
from fxdurable.core.session_state import MAX_STATE_BYTES, StateWrites
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import IllegalTransitionError, StateTooLargeError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock

HOST = WorkerIdentity(host="host-a", pid=100)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    store = SqliteStore(f"sqlite:///{tmp_path}/finish.db")
    yield Journal(store, FakeClock(1_000.0), RandomIds())
    store.close()


def _running(journal: Journal, calls: int) -> tuple[Fence, list[ToolTaskRecord]]:
    """A turn whose response asked for ``calls`` safe calls, all started in one commit."""
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    fence = journal.claim("s1", HOST, ttl_s=30.0)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w1")
    made = journal.record_model_call(
        fence,
        sub.id,
        round_=0,
        text="",
        tool_calls=[ToolCallRequest(name=f"t{i}", arguments="{}") for i in range(calls)],
        policies=["safe"] * calls,
        usage=Usage(),
    )
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
