"""Transitions that write without reading (``held``, issue 23 §2): the lease holder's next
transition writes from the records its last commit returned, fenced by their versions in the
statements; a stale holder's attempt conflicts, writes nothing, and the ordinary
read-check-write decides. That is only sound if every other writer of a session moves its
version, which is checked here writer by writer."""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Fence, Held, Journal, StartNext, ToolStep, WorkerIdentity
from fxdurable.core.records import SessionRecord, ToolCallRequest, ToolTaskRecord, Usage
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import FxDurableError, LeaseLostError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock

HOST = WorkerIdentity(host="host-a", pid=100)
OTHER = WorkerIdentity(host="host-b", pid=200)
TTL = 30.0


@dataclass
class Traced:
    """A journal on SQLite whose statements are counted by their first word."""

    journal: Journal
    clock: FakeClock
    sql: Counter[str]

    def session(self) -> SessionRecord:
        found = self.journal.read(lambda v: v.get_session("s1"))
        assert found is not None
        return found

    def counted(self, fn: Callable[[], object]) -> Counter[str]:
        self.sql.clear()
        fn()
        return Counter(self.sql)


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Traced]:
    sql: Counter[str] = Counter()
    opened = SqliteStore._open_connection

    def traced_open(store: SqliteStore) -> sqlite3.Connection:
        conn = opened(store)
        conn.set_trace_callback(lambda statement: sql.update([statement.split()[0].upper()]))
        return conn

    monkeypatch.setattr(SqliteStore, "_open_connection", traced_open)
    store = SqliteStore(f"sqlite:///{tmp_path}/held.db")
    clock = FakeClock(1_000.0)
    yield Traced(Journal(store, clock, RandomIds()), clock, sql)
    store.close()


@dataclass
class Round:
    fence: Fence
    submission_id: str
    first: ToolStep  # the first call's intent, committed with the model's response
    second: ToolTaskRecord  # pending

    @property
    def second_id(self) -> str:
        return self.second.id


def _round(t: Traced) -> Round:
    """Admitted, claimed, an attempt begun, and a response asking for two calls whose first
    intent joined the response's commit."""
    j = t.journal
    sub = j.admit("s1", agent="a", prompt="go").submission
    fence = j.claim("s1", HOST, ttl_s=TTL)
    assert fence is not None
    j.begin_attempt(fence, sub.id, worker="w1")
    calls = [ToolCallRequest(name=n, arguments="{}") for n in ("one", "two")]
    made = j.record_model_call(
        fence,
        sub.id,
        round_=0,
        text="",
        tool_calls=calls,
        policies=["safe", "unsafe"],
        usage=Usage(),
        start_next=lambda r: StartNext(r.tasks[0].id),
    )
    assert made.started is not None and made.started.task.status == ToolTaskStatus.RUNNING
    return Round(fence, sub.id, made.started, made.tasks[1])


def _held(step: ToolStep, r: Round, t: Traced) -> Held:
    assert step.written.session is not None
    turn = t.journal.read(lambda v: v.get_turn(r.submission_id))
    sub = t.journal.read(lambda v: v.get_submission(r.submission_id))
    return Held(step.written.session, sub, turn, {step.task.id: step.task, r.second_id: r.second})


def test_a_held_step_is_one_commit_with_no_select_and_matches_a_read(traced: Traced) -> None:
    r = _round(traced)
    held = _held(r.first, r, traced)
    steps: list[ToolStep] = []

    def finish() -> None:
        steps.append(
            traced.journal.finish_tool(
                r.fence,
                r.first.task.id,
                ToolTaskStatus.COMPLETED,
                "1",
                start_next=lambda s: StartNext(r.second_id),
                held=held,
            )
        )

    sql = traced.counted(finish)
    assert sql["SELECT"] == 0 and sql["COMMIT"] == 1 and sql["ROLLBACK"] == 0, sql
    [step] = steps
    assert step.started is not None and step.started.task.id == r.second_id
    # What it returned is what a read after it finds: the next transition may hold it.
    assert step.written.session == traced.session()
    stored = traced.journal.read(lambda v: v.get_tool_task(r.second_id))
    assert stored == step.started.task


def test_a_stale_holder_conflicts_writes_nothing_and_the_full_transition_refuses(
    traced: Traced,
) -> None:
    """Taken over after its intent: the old holder's held write conflicts in the statement
    (the session's version moved), rolls back, and the ordinary transition raises
    LeaseLostError; the task stays as the takeover found it."""
    r = _round(traced)
    held = _held(r.first, r, traced)
    traced.clock.advance(TTL + 1)
    assert traced.journal.claim("s1", OTHER, ttl_s=TTL) is not None
    version = traced.session().version
    with pytest.raises(LeaseLostError):
        traced.journal.finish_tool(
            r.fence, r.first.task.id, ToolTaskStatus.COMPLETED, "1", held=held
        )
    assert traced.sql["ROLLBACK"] >= 1  # the held attempt's rollback, then the full one's
    task = traced.journal.read(lambda v: v.get_tool_task(r.first.task.id))
    assert task is not None and task.status == ToolTaskStatus.RUNNING
    assert traced.session().version == version


def test_a_holder_whose_session_moved_falls_back_and_decides_on_what_it_reads(
    traced: Traced,
) -> None:
    """A steer lands between the intent and the result: the held write conflicts, the
    ordinary transition reads the session, commits, and its ``start_next`` saw the steering
    (a merged decision is made on the session as the commit leaves it)."""
    r = _round(traced)
    held = _held(r.first, r, traced)
    traced.journal.steer("s1", "stop after this one")
    seen: list[tuple[str, ...]] = []
    steps: list[ToolStep] = []

    def start_next(step: ToolStep) -> StartNext | None:
        seen.append(step.written.steering)
        return None if step.written.steering else StartNext(r.second_id)

    def finish() -> None:
        steps.append(
            traced.journal.finish_tool(
                r.fence,
                r.first.task.id,
                ToolTaskStatus.COMPLETED,
                "1",
                start_next=start_next,
                held=held,
            )
        )

    sql = traced.counted(finish)
    [step] = steps
    assert step.started is None
    assert step.written.session == traced.session()
    assert sql["ROLLBACK"] == 1 and sql["COMMIT"] == 1, sql  # one conflict, one commit
    assert seen[-1] == ("stop after this one",)
    second = traced.journal.read(lambda v: v.get_tool_task(r.second_id))
    assert second is not None and second.status == ToolTaskStatus.PENDING


# -- every other writer moves the session's version ------------------------------------------


def _claim(t: Traced, r: Round) -> None:
    t.journal.release(r.fence)
    assert t.journal.claim("s1", OTHER, ttl_s=TTL) is not None


def _takeover(t: Traced, r: Round) -> None:
    t.clock.advance(TTL + 1)
    assert t.journal.claim("s1", OTHER, ttl_s=TTL) is not None


def _answer(t: Traced, r: Round) -> None:
    # A question about the pending second call is asked by the holder; a person answers it.
    t.journal.finish_tool(r.fence, r.first.task.id, ToolTaskStatus.COMPLETED, "1")
    t.journal.request_input(
        r.fence, r.submission_id, question="ok?", about="tool", task_id=r.second_id
    )
    before = t.session().version
    t.journal.answer_input("s1", "allow", task_id=r.second_id)
    assert t.session().version > before


def _settle(t: Traced, r: Round) -> None:
    t.journal.finish_tool(r.fence, r.first.task.id, ToolTaskStatus.COMPLETED, "1")
    before = t.session().version
    t.journal.settle(r.fence, r.submission_id, "failed")
    assert t.session().version > before


WRITERS: dict[str, Callable[[Traced, Round], object]] = {
    "claim": _claim,
    "takeover": _takeover,
    "steer": lambda t, r: t.journal.steer("s1", "also"),
    "abort": lambda t, r: t.journal.request_abort("s1"),
    "heartbeat": lambda t, r: t.journal.heartbeat(r.fence, ttl_s=TTL),
    "settle": _settle,
    "admit": lambda t, r: t.journal.admit("s1", agent="a", prompt="next"),
    "answer": _answer,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_other_writer_moves_the_session_version(traced: Traced, writer: str) -> None:
    """So a holder's held write after any of them conflicts instead of landing."""
    r = _round(traced)
    held = _held(r.first, r, traced)
    before = traced.session().version
    WRITERS[writer](traced, r)
    assert traced.session().version > before
    # And the held write now falls back: its statement-level fence did not hold.
    traced.sql.clear()
    # The ordinary transition's verdict may be a refusal (a lost lease, a settled turn).
    with contextlib.suppress(FxDurableError):
        traced.journal.finish_tool(
            r.fence, r.first.task.id, ToolTaskStatus.COMPLETED, "1", held=held
        )
    assert traced.sql["ROLLBACK"] >= 1, (writer, traced.sql)
