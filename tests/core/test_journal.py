"""The journal's named transitions over a real SQLite store, happy and unhappy paths.

Time and ids are injected: a settable clock and a counter id source make every record
predictable. After every refused transition the whole database is compared with a snapshot
taken before it: a rollback that leaves anything behind fails the test.
"""

from __future__ import annotations

import gc
import itertools
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from fxdurable.core.clock import execution_id, tool_task_id
from fxdurable.core.journal import MAX_PROGRESS_CHARS, AttemptStart, Fence, Journal, WorkerIdentity
from fxdurable.core.records import (
    ErrorInfo,
    EventRecord,
    SessionRecord,
    SubmissionRecord,
    ToolCallRequest,
    ToolTaskRecord,
    Usage,
)
from fxdurable.core.states import (
    AttemptStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
)
from fxdurable.core.store import Tx
from fxdurable.errors import (
    AgentBusyError,
    AgentMismatchError,
    IllegalTransitionError,
    LeaseLostError,
    RecordNotFoundError,
    RequestConflictError,
    StoreError,
)
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock
from fxdurable.testing.invariants import check_store

T0 = 1_000.0
TTL = 30.0
HOST_A = WorkerIdentity(host="host-a", pid=100)
HOST_A_OTHER_PID = WorkerIdentity(host="host-a", pid=101)
HOST_B = WorkerIdentity(host="host-b", pid=100)
USAGE = Usage(input_tokens=7, output_tokens=3)


class CountingIds:
    def __init__(self) -> None:
        self._n = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._n)}"


@pytest.fixture
def store(tmp_path: Any) -> Iterator[SqliteStore]:
    s = SqliteStore(f"sqlite:///{tmp_path}/j.db")
    yield s
    s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def journal(store: SqliteStore, clock: FakeClock) -> Journal:
    return Journal(store, clock, CountingIds())


# -- helpers ---------------------------------------------------------------------------------


def dump(store: SqliteStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read through a separate connection (committed data only)."""
    conn = sqlite3.connect(store.path)
    try:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    finally:
        conn.close()


def session(journal: Journal, session_id: str = "s1") -> SessionRecord:
    record = journal.read(lambda r: r.get_session(session_id))
    assert record is not None
    return record


def submission(journal: Journal, submission_id: str) -> SubmissionRecord:
    record = journal.read(lambda r: r.get_submission(submission_id))
    assert record is not None
    return record


def task(journal: Journal, task_id: str) -> ToolTaskRecord:
    record = journal.read(lambda r: r.get_tool_task(task_id))
    assert record is not None
    return record


def events(journal: Journal, session_id: str = "s1") -> list[EventRecord]:
    return list(journal.read(lambda r: r.events(session_id)))


def event_types(journal: Journal, session_id: str = "s1") -> list[str]:
    return [e.type for e in events(journal, session_id)]


def calls(*names: str) -> list[ToolCallRequest]:
    return [
        ToolCallRequest(name=n, arguments=f'{{"i": {i}}}', provider_id=f"call_{i}")
        for i, n in enumerate(names)
    ]


@dataclass
class Running:
    fence: Fence
    start: AttemptStart

    @property
    def sub_id(self) -> str:
        return self.start.submission.id

    @property
    def turn_id(self) -> str:
        return self.start.turn.id


def run_turn(journal: Journal, session_id: str = "s1", prompt: str = "hello") -> Running:
    """Admit, claim and begin the first attempt: a turn running with no model call yet."""
    admission = journal.admit(session_id, agent="agent", prompt=prompt)
    fence = journal.claim(session_id, HOST_A, ttl_s=TTL)
    assert fence is not None
    start = journal.begin_attempt(fence, admission.submission.id, worker="w1")
    return Running(fence, start)


def with_tasks(journal: Journal, *policies: str) -> tuple[Running, list[ToolTaskRecord]]:
    run = run_turn(journal)
    names = [f"tool{i}" for i in range(len(policies))]
    tasks = journal.record_model_call(
        run.fence,
        run.turn_id,
        round_=0,
        text="using tools",
        tool_calls=calls(*names),
        policies=list(policies),
        usage=USAGE,
    ).tasks
    return run, list(tasks)


def assert_refused(
    store: SqliteStore, exc: type[BaseException], action: Callable[[], object]
) -> BaseException:
    """``action`` raises ``exc`` and the database is byte-for-byte what it was before."""
    before = dump(store)
    with pytest.raises(exc) as info:
        action()
    assert dump(store) == before
    return info.value


# -- admission -------------------------------------------------------------------------------


def test_admit_creates_session_and_queued_submission(journal: Journal) -> None:
    admission = journal.admit("s1", agent="agent", prompt="hello", request_id="r1")

    assert admission.created is True
    sub = admission.submission
    assert sub.session_id == "s1"
    assert sub.seq == 1
    assert sub.request_id == "r1"
    assert sub.prompt == "hello"
    assert sub.status is SubmissionStatus.QUEUED
    assert sub.created_at == T0
    assert (sub.attempts, sub.interruptions, sub.abort_requested) == (0, 0, False)
    assert submission(journal, sub.id) == sub

    s = session(journal)
    assert s.agent == "agent"
    assert s.status is SessionStatus.ACTIVE
    assert s.created_at == T0
    assert s.next_submission_seq == 2
    assert s.lease.owner is None and s.lease.token == 0

    evs = events(journal)
    assert [(e.seq, e.type) for e in evs] == [(1, "session.created"), (2, "submission.admitted")]
    assert evs[0].data == {"agent": "agent"}
    assert evs[1].data == {"submission": sub.id, "request_id": "r1"}
    assert all(e.at == T0 for e in evs)
    assert s.next_event_seq == 3


def test_admit_generates_a_request_id_when_none_given(journal: Journal) -> None:
    a = journal.admit("s1", agent="agent", prompt="x")
    b = journal.admit("s1", agent="agent", prompt="x")
    assert a.submission.request_id != b.submission.request_id
    assert b.created is True


def test_admit_queues_in_admission_order(journal: Journal) -> None:
    first = journal.admit("s1", agent="agent", prompt="one").submission
    second = journal.admit("s1", agent="agent", prompt="two").submission
    assert (first.seq, second.seq) == (1, 2)
    assert event_types(journal) == [
        "session.created",
        "submission.admitted",
        "submission.admitted",
    ]
    unsettled = journal.read(lambda r: [s.id for s in r.unsettled_submissions("s1")])
    assert unsettled == [first.id, second.id]


def test_admit_is_idempotent_on_request_id(journal: Journal, store: SqliteStore) -> None:
    first = journal.admit("s1", agent="agent", prompt="hello", request_id="r1")
    before = dump(store)

    again = journal.admit("s1", agent="agent", prompt="hello", request_id="r1")

    assert again.created is False
    assert again.submission == first.submission
    assert dump(store) == before


def test_admit_without_a_session_starts_one_and_a_retry_finds_it(
    journal: Journal, store: SqliteStore
) -> None:
    first = journal.admit(None, agent="agent", prompt="hello", request_id="r1")
    assert first.created
    session_id = first.submission.session_id
    session = journal.read(lambda r: r.get_session(session_id))
    assert session is not None and session.agent == "agent"
    before = dump(store)

    again = journal.admit(None, agent="agent", prompt="hello", request_id="r1")

    assert again.created is False and again.submission == first.submission
    assert dump(store) == before
    other = journal.admit(None, agent="agent", prompt="hello")
    assert other.submission.session_id != session_id
    # The same request id with another prompt is still a conflict.
    assert_refused(
        store,
        RequestConflictError,
        lambda: journal.admit(None, agent="agent", prompt="bye", request_id="r1"),
    )


def test_admit_retry_after_settle_returns_the_settled_submission(journal: Journal) -> None:
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "completed", text="done")
    retried = journal.admit(
        "s1", agent="agent", prompt="hello", request_id=run.start.submission.request_id
    )
    assert retried.created is False
    assert retried.submission.id == run.sub_id
    assert retried.submission.status is SubmissionStatus.COMPLETED


def test_request_id_reused_for_another_session_is_refused(
    journal: Journal, store: SqliteStore
) -> None:
    journal.admit("s1", agent="agent", prompt="hello", request_id="r1")
    err = assert_refused(
        store,
        RequestConflictError,
        lambda: journal.admit("s2", agent="agent", prompt="hello", request_id="r1"),
    )
    assert "r1" in str(err)
    assert journal.read(lambda r: r.get_session("s2")) is None


def test_when_busy_reject_on_an_active_session_writes_nothing(
    journal: Journal, store: SqliteStore
) -> None:
    journal.admit("s1", agent="agent", prompt="first")
    count = len(events(journal))

    err = assert_refused(
        store,
        AgentBusyError,
        lambda: journal.admit("s1", agent="agent", prompt="second", when_busy="reject"),
    )

    assert isinstance(err, AgentBusyError) and err.session_id == "s1"
    assert len(events(journal)) == count
    assert len(journal.read(lambda r: r.submissions("s1"))) == 1


def test_when_busy_reject_admits_on_a_new_or_idle_session(journal: Journal) -> None:
    assert journal.admit("s1", agent="agent", prompt="x", when_busy="reject").created
    run_fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert run_fence is not None
    sub_id = journal.read(lambda r: r.submissions("s1"))[0].id
    journal.begin_attempt(run_fence, sub_id, worker="w1")
    journal.settle(run_fence, sub_id, "completed", text="ok")
    assert session(journal).status is SessionStatus.IDLE

    again = journal.admit("s1", agent="agent", prompt="y", when_busy="reject")
    assert again.created and again.submission.seq == 2


def test_when_busy_must_be_known(journal: Journal, store: SqliteStore) -> None:
    assert_refused(
        store,
        ValueError,
        lambda: journal.admit("s1", agent="agent", prompt="x", when_busy="wait"),  # type: ignore[arg-type]
    )


def test_session_bound_to_agent_refuses_another_agent(journal: Journal, store: SqliteStore) -> None:
    journal.admit("s1", agent="agent", prompt="hello")
    err = assert_refused(
        store,
        AgentMismatchError,
        lambda: journal.admit("s1", agent="intruder", prompt="hello"),
    )
    assert isinstance(err, AgentMismatchError)
    assert (err.session_id, err.bound_to, err.asked) == ("s1", "agent", "intruder")
    assert "agent" in str(err) and "intruder" in str(err)


# -- leases ----------------------------------------------------------------------------------


def test_claim_returns_a_fence_and_records_the_lease(journal: Journal) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)

    assert fence is not None
    assert fence.session_id == "s1"
    assert fence.token == 1
    lease = session(journal).lease
    assert lease.owner == fence.owner
    assert lease.token == 1
    assert lease.expires_at == T0 + TTL
    assert (lease.host, lease.pid) == (HOST_A.host, HOST_A.pid)


def test_claim_of_an_unknown_session_raises(journal: Journal, store: SqliteStore) -> None:
    assert_refused(store, RecordNotFoundError, lambda: journal.claim("nope", HOST_A, ttl_s=TTL))


def test_second_claim_while_live_returns_none(journal: Journal, store: SqliteStore) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    first = journal.claim("s1", HOST_A, ttl_s=TTL)
    before = dump(store)

    assert journal.claim("s1", HOST_B, ttl_s=TTL) is None

    assert dump(store) == before
    assert session(journal).lease.owner == first.owner  # type: ignore[union-attr]


def test_lease_is_held_until_its_expiry(journal: Journal, clock: FakeClock) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    journal.claim("s1", HOST_A, ttl_s=TTL)
    clock.set(T0 + TTL - 0.001)
    assert journal.claim("s1", HOST_B, ttl_s=TTL) is None


def test_expired_lease_is_taken_over_with_the_next_token(
    journal: Journal, clock: FakeClock
) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    first = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert first is not None
    clock.set(T0 + TTL + 1)

    second = journal.claim("s1", HOST_B, ttl_s=TTL)

    assert second is not None
    assert second.token == first.token + 1
    assert second.owner != first.owner
    lease = session(journal).lease
    assert (lease.owner, lease.token, lease.host) == (second.owner, 2, "host-b")
    assert lease.expires_at == clock.now() + TTL


def test_dead_holder_on_the_same_host_is_taken_over_at_once(journal: Journal) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    first = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert first is not None
    asked: list[tuple[str, int]] = []

    def dead(host: str, pid: int) -> bool:
        asked.append((host, pid))
        return True

    second = journal.claim("s1", HOST_A_OTHER_PID, ttl_s=TTL, holder_is_dead=dead)

    assert asked == [("host-a", 100)]
    assert second is not None and second.token == first.token + 1
    assert session(journal).lease.pid == HOST_A_OTHER_PID.pid


def test_live_holder_on_the_same_host_is_not_taken_over(
    journal: Journal, store: SqliteStore
) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    journal.claim("s1", HOST_A, ttl_s=TTL)
    before = dump(store)
    asked: list[tuple[str, int]] = []

    def alive(host: str, pid: int) -> bool:
        asked.append((host, pid))
        return False

    assert journal.claim("s1", HOST_A_OTHER_PID, ttl_s=TTL, holder_is_dead=alive) is None
    assert asked == [("host-a", 100)]
    assert dump(store) == before


def test_pid_liveness_is_not_trusted_across_hosts(journal: Journal) -> None:
    """A pid means nothing on another host: only expiry frees a remote holder's lease."""
    journal.admit("s1", agent="agent", prompt="x")
    journal.claim("s1", HOST_A, ttl_s=TTL)
    asked: list[tuple[str, int]] = []

    def dead(host: str, pid: int) -> bool:
        asked.append((host, pid))
        return True

    assert journal.claim("s1", HOST_B, ttl_s=TTL, holder_is_dead=dead) is None
    assert asked == []


def test_heartbeat_extends_the_lease(journal: Journal, clock: FakeClock) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None
    clock.set(T0 + 20)
    journal.heartbeat(fence, ttl_s=TTL)
    assert session(journal).lease.expires_at == T0 + 20 + TTL

    clock.set(T0 + TTL + 5)  # past the first expiry, inside the extended one
    assert journal.claim("s1", HOST_B, ttl_s=TTL) is None
    journal.heartbeat(fence, ttl_s=TTL)  # still the owner


def test_release_with_unsettled_work_returns_true(journal: Journal) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None

    assert journal.release(fence) is True

    lease = session(journal).lease
    assert lease.owner is None
    assert lease.token == fence.token  # the token only ever grows; release keeps it
    assert (lease.host, lease.pid) == (None, None)
    again = journal.claim("s1", HOST_B, ttl_s=TTL)  # free at once, no expiry to wait out
    assert again is not None and again.token == fence.token + 1


def test_release_with_nothing_unsettled_returns_false(journal: Journal) -> None:
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "completed", text="ok")
    assert journal.release(run.fence) is False
    assert session(journal).lease.owner is None


def test_release_sees_work_admitted_while_the_lease_was_held(journal: Journal) -> None:
    """The lost wake-up (DESIGN §9): release and the check for queued work are one step."""
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "completed", text="ok")
    journal.admit("s1", agent="agent", prompt="arrived late")
    assert journal.release(run.fence) is True


def test_release_with_a_stale_fence_leaves_the_new_owner_alone(
    journal: Journal, clock: FakeClock, store: SqliteStore
) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    old = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert old is not None
    clock.set(T0 + TTL + 1)
    new = journal.claim("s1", HOST_B, ttl_s=TTL)
    assert new is not None
    before = dump(store)

    assert journal.release(old) is False

    assert dump(store) == before
    assert session(journal).lease.owner == new.owner


# -- fencing ---------------------------------------------------------------------------------


FENCED_CALLS: dict[str, Callable[[Journal, Fence, Running, list[ToolTaskRecord]], object]] = {
    "heartbeat": lambda j, f, run, tasks: j.heartbeat(f, ttl_s=TTL),
    "begin_attempt": lambda j, f, run, tasks: j.begin_attempt(f, run.sub_id, worker="w1"),
    "record_model_call": lambda j, f, run, tasks: j.record_model_call(
        f, run.turn_id, round_=1, text="done", tool_calls=[], policies=[], usage=USAGE
    ),
    "start_tool": lambda j, f, run, tasks: j.start_tool(f, tasks[1].id),
    "finish_tool": lambda j, f, run, tasks: j.finish_tool(
        f, tasks[0].id, ToolTaskStatus.COMPLETED, "ok"
    ),
    "record_progress": lambda j, f, run, tasks: j.record_progress(
        f, tasks[0].id, run=1, text="half way"
    ),
    "suspend": lambda j, f, run, tasks: j.suspend(f, run.sub_id, reason="deadline"),
    "settle": lambda j, f, run, tasks: j.settle(f, run.sub_id, "aborted"),
}


@pytest.mark.parametrize("name", sorted(FENCED_CALLS))
def test_stale_fence_cannot_write(
    name: str, journal: Journal, clock: FakeClock, store: SqliteStore
) -> None:
    run, tasks = with_tasks(journal, "safe", "safe")
    journal.start_tool(run.fence, tasks[0].id)
    clock.set(T0 + TTL + 1)
    new = journal.claim("s1", HOST_B, ttl_s=TTL)
    assert new is not None and new.token == run.fence.token + 1

    err = assert_refused(
        store, LeaseLostError, lambda: FENCED_CALLS[name](journal, run.fence, run, tasks)
    )
    assert "s1" in str(err)


@pytest.mark.parametrize("name", sorted(FENCED_CALLS))
def test_current_fence_can_write(name: str, journal: Journal, clock: FakeClock) -> None:
    """The control for the test above: the same call with the new owner's fence is accepted."""
    run, tasks = with_tasks(journal, "safe", "safe")
    journal.start_tool(run.fence, tasks[0].id)
    clock.set(T0 + TTL + 1)
    new = journal.claim("s1", HOST_B, ttl_s=TTL)
    assert new is not None
    if name == "settle":
        journal.finish_tool(new, tasks[0].id, ToolTaskStatus.CANCELLED, "cancelled")
    if name in ("record_model_call", "suspend", "settle", "start_tool", "finish_tool"):
        journal.begin_attempt(new, run.sub_id, worker="w2")
    FENCED_CALLS[name](journal, new, run, tasks)


def test_forged_owner_with_the_current_token_is_refused(
    journal: Journal, store: SqliteStore
) -> None:
    run = run_turn(journal)
    forged = Fence(run.fence.session_id, "someone-else", run.fence.token)
    assert_refused(store, LeaseLostError, lambda: journal.heartbeat(forged, ttl_s=TTL))
    assert_refused(store, LeaseLostError, lambda: journal.suspend(forged, run.sub_id, reason="x"))


def test_released_fence_cannot_write(journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    journal.release(run.fence)
    assert_refused(store, LeaseLostError, lambda: journal.heartbeat(run.fence, ttl_s=TTL))
    assert_refused(
        store, LeaseLostError, lambda: journal.suspend(run.fence, run.sub_id, reason="x")
    )


def test_fence_of_one_session_cannot_write_another_sessions_records(
    journal: Journal, store: SqliteStore
) -> None:
    """A lease on session A is no licence to write session B (whose lease it does not hold).

    The journal checks the fence against the session the fence names, then loads the
    submission/turn/task by id without checking it belongs to that session.
    """
    a = run_turn(journal, "A")
    b = journal.admit("B", agent="agent", prompt="b's prompt").submission
    assert_refused(store, StoreError, lambda: journal.begin_attempt(a.fence, b.id, worker="w1"))
    assert_refused(store, StoreError, lambda: journal.settle(a.fence, b.id, "aborted"))


# -- attempts and turns ----------------------------------------------------------------------


def test_begin_attempt_starts_the_turn(journal: Journal, clock: FakeClock) -> None:
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None
    clock.set(T0 + 1)

    start = journal.begin_attempt(fence, sub.id, worker="w1")

    assert start.recovered is False
    stored = submission(journal, sub.id)
    assert stored.status is SubmissionStatus.RUNNING
    assert stored.started_at == T0 + 1
    assert (stored.attempts, stored.interruptions) == (1, 0)
    assert start.turn.status is TurnStatus.RUNNING
    assert start.turn.submission_id == sub.id and start.turn.session_id == "s1"
    assert journal.read(lambda r: r.get_turn(start.turn.id)) == start.turn
    attempts = journal.read(lambda r: r.attempts(sub.id))
    assert attempts == [start.attempt]
    assert (start.attempt.number, start.attempt.status) == (1, AttemptStatus.RUNNING)
    assert (start.attempt.worker, start.attempt.started_at) == ("w1", T0 + 1)
    messages = journal.read(lambda r: r.messages("s1"))
    assert [(m.seq, m.role, m.text, m.turn_id) for m in messages] == [
        (1, "user", "hello", start.turn.id)
    ]
    assert event_types(journal)[-2:] == ["turn.started", "attempt.started"]


def test_begin_attempt_returns_the_submission_as_stored(journal: Journal) -> None:
    """AttemptStart.submission must be the committed record, version included.

    ``begin_attempt`` writes ``sub`` with ``version + 1`` but returns ``sub`` as read, so a
    caller holding the returned record has a stale version (``settle`` gets this right).
    """
    run = run_turn(journal)
    assert run.start.submission == submission(journal, run.sub_id)


def test_begin_attempt_after_a_crash_interrupts_the_previous_attempt(
    journal: Journal, clock: FakeClock
) -> None:
    run = run_turn(journal)
    clock.set(T0 + TTL + 1)
    new = journal.claim("s1", HOST_B, ttl_s=TTL)
    assert new is not None

    start = journal.begin_attempt(new, run.sub_id, worker="w2")

    assert start.recovered is True
    assert start.turn == run.start.turn  # the turn resumes, it is not started again
    assert start.attempt.number == 2
    first, second = journal.read(lambda r: r.attempts(run.sub_id))
    assert first.status is AttemptStatus.INTERRUPTED
    assert (first.reason, first.ended_at) == ("crash", clock.now())
    assert second.status is AttemptStatus.RUNNING and second.worker == "w2"
    stored = submission(journal, run.sub_id)
    assert (stored.attempts, stored.interruptions) == (2, 1)
    assert stored.status is SubmissionStatus.RUNNING
    assert len(journal.read(lambda r: r.messages("s1"))) == 1  # no second user message
    assert event_types(journal)[-2:] == ["attempt.interrupted", "attempt.started"]


def test_begin_attempt_after_a_suspend_is_not_a_recovery(journal: Journal) -> None:
    run = run_turn(journal)
    journal.suspend(run.fence, run.sub_id, reason="deadline")
    start = journal.begin_attempt(run.fence, run.sub_id, worker="w1")
    assert start.recovered is False
    assert start.attempt.number == 2
    stored = submission(journal, run.sub_id)
    assert (stored.attempts, stored.interruptions) == (2, 0)


def test_begin_attempt_on_a_settled_submission_is_refused(
    journal: Journal, store: SqliteStore
) -> None:
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "completed", text="ok")
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.begin_attempt(run.fence, run.sub_id, worker="w"),
    )


def test_begin_attempt_on_an_unknown_submission_raises(
    journal: Journal, store: SqliteStore
) -> None:
    run = run_turn(journal)
    assert_refused(
        store, RecordNotFoundError, lambda: journal.begin_attempt(run.fence, "sub-nope", worker="w")
    )


def test_suspend_yields_the_attempt(journal: Journal, clock: FakeClock) -> None:
    run = run_turn(journal)
    clock.set(T0 + 5)
    journal.suspend(run.fence, run.sub_id, reason="deadline")

    (attempt,) = journal.read(lambda r: r.attempts(run.sub_id))
    assert attempt.status is AttemptStatus.YIELDED
    assert (attempt.reason, attempt.ended_at) == ("deadline", T0 + 5)
    assert submission(journal, run.sub_id).status is SubmissionStatus.RUNNING
    last = events(journal)[-1]
    assert last.type == "attempt.yielded"
    assert last.data == {"number": 1, "reason": "deadline"}


def test_suspend_without_a_running_attempt_is_refused(journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    journal.suspend(run.fence, run.sub_id, reason="deadline")
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.suspend(run.fence, run.sub_id, reason="again"),
    )


# -- model calls -----------------------------------------------------------------------------


def test_record_model_call_creates_positional_pending_tasks(journal: Journal) -> None:
    run = run_turn(journal)
    requested = [
        ToolCallRequest(name="read_file", arguments='{"path": "a"}', provider_id="dup"),
        ToolCallRequest(name="shell", arguments='{"cmd": "ls"}', provider_id="dup"),
        ToolCallRequest(name="read_file", arguments='{"path": "b"}', provider_id=None),
    ]

    tasks = journal.record_model_call(
        run.fence,
        run.turn_id,
        round_=0,
        text="let me look",
        tool_calls=requested,
        policies=["safe", "unsafe", "safe"],
        usage=USAGE,
    ).tasks

    # Identity is position: a provider that repeats or omits its call id changes nothing.
    assert [t.id for t in tasks] == [tool_task_id(run.turn_id, 0, i) for i in range(3)]
    assert len({t.id for t in tasks}) == 3
    assert [t.execution_id for t in tasks] == [execution_id(t.id) for t in tasks]
    assert len({t.execution_id for t in tasks}) == 3
    assert [(t.round, t.index) for t in tasks] == [(0, 0), (0, 1), (0, 2)]
    assert [t.tool for t in tasks] == ["read_file", "shell", "read_file"]
    assert [t.arguments for t in tasks] == [c.arguments for c in requested]
    assert [t.provider_id for t in tasks] == ["dup", "dup", None]
    assert [t.policy for t in tasks] == ["safe", "unsafe", "safe"]
    assert all(t.status is ToolTaskStatus.PENDING and t.runs == 0 for t in tasks)
    assert journal.read(lambda r: tuple(r.tool_tasks(run.turn_id))) == tasks

    call = journal.read(lambda r: r.get_model_call(run.turn_id, 0))
    assert call is not None
    assert (call.text, call.tool_calls, call.usage) == ("let me look", tuple(requested), USAGE)
    assert journal.read(lambda r: r.get_turn(run.turn_id)).rounds == 1
    messages = journal.read(lambda r: r.messages("s1"))
    assert [(m.seq, m.role, m.round) for m in messages] == [(1, "user", None), (2, "assistant", 0)]
    assert messages[1].tool_calls == tuple(requested)
    last = events(journal)[-1]
    assert last.type == "model.completed"
    assert last.data["tools"] == ["read_file", "shell", "read_file"]
    assert (last.data["input_tokens"], last.data["output_tokens"]) == (7, 3)


def test_execution_ids_are_stable(journal: Journal) -> None:
    """The downstream idempotency key derives from position only: the same on every retry."""
    assert execution_id(tool_task_id("t", 0, 1)) == execution_id(tool_task_id("t", 0, 1))
    assert execution_id(tool_task_id("t", 0, 1)) != execution_id(tool_task_id("t", 1, 0))
    run, tasks = with_tasks(journal, "idempotent")
    journal.start_tool(run.fence, tasks[0].id)
    again = journal.start_tool(run.fence, tasks[0].id, reason="recovery").task
    assert again.execution_id == tasks[0].execution_id


def test_record_model_call_rounds_follow_one_another(journal: Journal) -> None:
    run, _ = with_tasks(journal, "safe")
    tasks = journal.record_model_call(
        run.fence,
        run.turn_id,
        round_=1,
        text="more",
        tool_calls=calls("x"),
        policies=["safe"],
        usage=USAGE,
    ).tasks
    assert tasks[0].id == tool_task_id(run.turn_id, 1, 0)
    assert journal.read(lambda r: r.get_turn(run.turn_id)).rounds == 2


@pytest.mark.parametrize("round_", [1, -1, 5])
def test_record_model_call_for_the_wrong_round_rolls_back(
    round_: int, journal: Journal, store: SqliteStore
) -> None:
    run = run_turn(journal)
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.record_model_call(
            run.fence,
            run.turn_id,
            round_=round_,
            text="x",
            tool_calls=calls("a", "b"),
            policies=["safe", "safe"],
            usage=USAGE,
        ),
    )
    assert journal.read(lambda r: r.tool_tasks(run.turn_id)) == []


def test_record_model_call_twice_for_one_round_is_refused(
    journal: Journal, store: SqliteStore
) -> None:
    """Steps never re-run once recorded: a second response for round 0 is not accepted."""
    run, _ = with_tasks(journal, "safe")
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.record_model_call(
            run.fence,
            run.turn_id,
            round_=0,
            text="again",
            tool_calls=calls("z"),
            policies=["safe"],
            usage=USAGE,
        ),
    )


def test_record_model_call_on_a_settled_turn_is_refused(
    journal: Journal, store: SqliteStore
) -> None:
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "failed", error=ErrorInfo(code="x", message="y"))
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.record_model_call(
            run.fence, run.turn_id, round_=0, text="x", tool_calls=[], policies=[], usage=USAGE
        ),
    )


def test_record_model_call_needs_one_policy_per_call(journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    assert_refused(
        store,
        ValueError,
        lambda: journal.record_model_call(
            run.fence,
            run.turn_id,
            round_=0,
            text="x",
            tool_calls=calls("a", "b"),
            policies=["safe"],
            usage=USAGE,
        ),
    )


def test_record_model_call_on_an_unknown_turn_raises(journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    assert_refused(
        store,
        RecordNotFoundError,
        lambda: journal.record_model_call(
            run.fence, "nope", round_=0, text="x", tool_calls=[], policies=[], usage=USAGE
        ),
    )


# -- tool tasks ------------------------------------------------------------------------------


def test_tool_task_pending_running_completed(journal: Journal, clock: FakeClock) -> None:
    run, (t,) = with_tasks(journal, "unsafe")
    clock.set(T0 + 1)
    started = journal.start_tool(run.fence, t.id).task
    assert started.status is ToolTaskStatus.RUNNING
    assert (started.runs, started.updated_at, started.version) == (1, T0 + 1, 2)
    assert task(journal, t.id) == started
    ev = events(journal)[-1]
    assert ev.type == "tool.started"
    assert ev.data["execution_id"] == t.execution_id
    assert (ev.data["run"], ev.data["policy"], ev.data["reason"]) == (1, "unsafe", None)

    clock.set(T0 + 2)
    done = journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, "42").task
    assert done.status is ToolTaskStatus.COMPLETED
    assert (done.result, done.runs, done.updated_at) == ("42", 1, T0 + 2)
    assert task(journal, t.id) == done
    ev = events(journal)[-1]
    assert ev.type == "tool.completed" and ev.data["result"] == "42"


def test_running_task_can_be_reexecuted(journal: Journal) -> None:
    run, (t,) = with_tasks(journal, "idempotent")
    journal.start_tool(run.fence, t.id)
    again = journal.start_tool(run.fence, t.id, reason="recovery").task
    assert again.status is ToolTaskStatus.RUNNING
    assert again.runs == 2
    assert events(journal)[-1].data["reason"] == "recovery"
    assert events(journal)[-1].data["run"] == 2


def test_completed_safe_task_can_be_refreshed(journal: Journal) -> None:
    run, (t,) = with_tasks(journal, "safe")
    journal.start_tool(run.fence, t.id)
    journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, "old")
    refreshed = journal.start_tool(run.fence, t.id, reason="refresh").task
    assert (refreshed.status, refreshed.runs) == (ToolTaskStatus.RUNNING, 2)
    done = journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, "new").task
    assert done.result == "new"


def test_pending_task_can_fail_without_running(journal: Journal) -> None:
    """Arguments that do not validate: nothing ran, the model reads the error."""
    run, (t,) = with_tasks(journal, "unsafe")
    failed = journal.finish_tool(run.fence, t.id, ToolTaskStatus.FAILED, "bad arguments").task
    assert (failed.status, failed.runs, failed.result) == (
        ToolTaskStatus.FAILED,
        0,
        "bad arguments",
    )


@pytest.mark.parametrize(
    ("setup", "target"),
    [
        ("pending", ToolTaskStatus.COMPLETED),  # a result without a committed intent
        ("pending", ToolTaskStatus.OUTCOME_UNKNOWN),
        ("pending", ToolTaskStatus.RUNNING),  # not terminal: use start_tool
        ("pending", ToolTaskStatus.PENDING),
        ("running", ToolTaskStatus.RUNNING),  # allowed by the table, but not a finish
        ("running", ToolTaskStatus.PENDING),
        ("running", ToolTaskStatus.REFUSED),
        ("completed", ToolTaskStatus.FAILED),  # settled once
        ("completed", ToolTaskStatus.COMPLETED),
        ("completed", ToolTaskStatus.RUNNING),
        ("failed", ToolTaskStatus.COMPLETED),
    ],
)
def test_illegal_finish_rolls_back(
    setup: str, target: ToolTaskStatus, journal: Journal, store: SqliteStore
) -> None:
    run, (t,) = with_tasks(journal, "safe")
    if setup in ("running", "completed"):
        journal.start_tool(run.fence, t.id)
    if setup == "completed":
        journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, "ok")
    if setup == "failed":
        journal.finish_tool(run.fence, t.id, ToolTaskStatus.FAILED, "no")
    assert task(journal, t.id).status.value == setup

    assert_refused(
        store, IllegalTransitionError, lambda: journal.finish_tool(run.fence, t.id, target, "x")
    )


@pytest.mark.parametrize(
    "status",
    [
        ToolTaskStatus.FAILED,
        ToolTaskStatus.CANCELLED,
        ToolTaskStatus.REFUSED,
        ToolTaskStatus.OUTCOME_UNKNOWN,
    ],
)
def test_settled_task_cannot_start_again(
    status: ToolTaskStatus, journal: Journal, store: SqliteStore
) -> None:
    run, (t,) = with_tasks(journal, "unsafe")
    if status is ToolTaskStatus.OUTCOME_UNKNOWN:
        journal.start_tool(run.fence, t.id)
    journal.finish_tool(run.fence, t.id, status, "settled")
    assert_refused(store, IllegalTransitionError, lambda: journal.start_tool(run.fence, t.id))


def test_tool_calls_on_an_unknown_task_raise(journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    assert_refused(store, RecordNotFoundError, lambda: journal.start_tool(run.fence, "nope"))
    assert_refused(
        store,
        RecordNotFoundError,
        lambda: journal.finish_tool(run.fence, "nope", ToolTaskStatus.FAILED, "x"),
    )


# -- settle ----------------------------------------------------------------------------------


def test_settle_completed(journal: Journal, clock: FakeClock) -> None:
    run = run_turn(journal)
    clock.set(T0 + 9)
    settled = journal.settle(run.fence, run.sub_id, "completed", text="the answer")

    assert settled == submission(journal, run.sub_id)
    assert settled.status is SubmissionStatus.COMPLETED
    assert (settled.result_text, settled.error, settled.settled_at) == ("the answer", None, T0 + 9)
    turn = journal.read(lambda r: r.get_turn(run.turn_id))
    assert (turn.status, turn.final_text) == (TurnStatus.COMPLETED, "the answer")
    (attempt,) = journal.read(lambda r: r.attempts(run.sub_id))
    assert (attempt.status, attempt.reason) == (AttemptStatus.FINISHED, "completed")
    assert session(journal).status is SessionStatus.IDLE
    ev = events(journal)[-1]
    assert ev.type == "submission.completed"
    assert ev.data == {"submission": run.sub_id, "text": "the answer"}


def test_settle_failed_records_a_structured_error(journal: Journal) -> None:
    run = run_turn(journal)
    error = ErrorInfo(code="budget", message="out of attempts", unknown_calls=("t/r0/t1",))
    settled = journal.settle(run.fence, run.sub_id, "failed", error=error)
    assert settled.error == error
    assert submission(journal, run.sub_id).error == error
    assert journal.read(lambda r: r.get_turn(run.turn_id)).status is TurnStatus.FAILED
    assert events(journal)[-1].data["error"] == {
        "code": "budget",
        "message": "out of attempts",
        "unknown_calls": ["t/r0/t1"],
    }


@pytest.mark.parametrize("second", ["completed", "failed", "aborted"])
def test_settle_happens_exactly_once(second: str, journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "completed", text="ok")
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.settle(run.fence, run.sub_id, second),  # type: ignore[arg-type]
    )


def test_settle_cancels_pending_tasks(journal: Journal) -> None:
    run, tasks = with_tasks(journal, "safe", "unsafe", "safe")
    journal.start_tool(run.fence, tasks[0].id)
    journal.finish_tool(run.fence, tasks[0].id, ToolTaskStatus.COMPLETED, "kept")

    journal.settle(run.fence, run.sub_id, "aborted")

    after = journal.read(lambda r: list(r.tool_tasks(run.turn_id)))
    assert [(t.status, t.result) for t in after] == [
        (ToolTaskStatus.COMPLETED, "kept"),
        (ToolTaskStatus.CANCELLED, "cancelled"),
        (ToolTaskStatus.CANCELLED, "cancelled"),
    ]
    assert journal.read(lambda r: r.get_turn(run.turn_id)).status is TurnStatus.ABORTED


def test_settle_with_a_running_task_rolls_back(journal: Journal, store: SqliteStore) -> None:
    """A running task's outcome is evidence: it must be resolved, never silently dropped."""
    run, tasks = with_tasks(journal, "safe", "unsafe")
    journal.start_tool(run.fence, tasks[1].id)
    for outcome in ("completed", "failed", "aborted"):
        assert_refused(
            store,
            IllegalTransitionError,
            lambda o=outcome: journal.settle(run.fence, run.sub_id, o),  # type: ignore[misc]
        )
    assert task(journal, tasks[0].id).status is ToolTaskStatus.PENDING  # not cancelled either


def test_settle_queued_submission(journal: Journal, store: SqliteStore) -> None:
    """Abort before the first attempt is the only way a queued submission settles."""
    sub = journal.admit("s1", agent="agent", prompt="x").submission
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None
    for outcome in ("completed", "failed"):
        assert_refused(
            store,
            IllegalTransitionError,
            lambda o=outcome: journal.settle(fence, sub.id, o),  # type: ignore[misc]
        )
    settled = journal.settle(fence, sub.id, "aborted")
    assert settled.status is SubmissionStatus.ABORTED
    assert session(journal).status is SessionStatus.IDLE


def test_session_rests_only_when_nothing_is_unsettled(journal: Journal) -> None:
    run = run_turn(journal)
    second = journal.admit("s1", agent="agent", prompt="two").submission

    journal.settle(run.fence, run.sub_id, "completed", text="one done")
    assert session(journal).status is SessionStatus.ACTIVE
    assert [s.id for s in journal.read(lambda r: r.active_sessions())] == ["s1"]

    journal.begin_attempt(run.fence, second.id, worker="w1")
    journal.settle(run.fence, second.id, "completed", text="two done")
    assert session(journal).status is SessionStatus.IDLE
    assert journal.read(lambda r: r.active_sessions()) == []


def test_settle_unknown_submission_raises(journal: Journal, store: SqliteStore) -> None:
    run = run_turn(journal)
    assert_refused(store, RecordNotFoundError, lambda: journal.settle(run.fence, "nope", "aborted"))


# -- abort -----------------------------------------------------------------------------------


def test_request_abort_marks_every_unsettled_submission(journal: Journal) -> None:
    done = run_turn(journal)
    journal.settle(done.fence, done.sub_id, "completed", text="ok")
    running = journal.admit("s1", agent="agent", prompt="two").submission
    journal.begin_attempt(done.fence, running.id, worker="w1")
    queued = journal.admit("s1", agent="agent", prompt="three").submission

    marked = journal.request_abort("s1")

    assert marked == [running.id, queued.id]
    assert submission(journal, running.id).abort_requested is True
    assert submission(journal, queued.id).abort_requested is True
    assert submission(journal, done.sub_id).abort_requested is False
    ev = events(journal)[-1]
    assert ev.type == "abort.requested"
    assert ev.data == {"submissions": [running.id, queued.id]}
    # An intent, not an outcome: the statuses are unchanged until a worker settles them.
    assert submission(journal, running.id).status is SubmissionStatus.RUNNING


def test_request_abort_twice_writes_nothing_more(journal: Journal, store: SqliteStore) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    assert len(journal.request_abort("s1")) == 1
    before = dump(store)
    assert journal.request_abort("s1") == []
    assert dump(store) == before


def test_request_abort_on_an_idle_session_writes_nothing(
    journal: Journal, store: SqliteStore
) -> None:
    run = run_turn(journal)
    journal.settle(run.fence, run.sub_id, "completed", text="ok")
    before = dump(store)
    assert journal.request_abort("s1") == []
    assert dump(store) == before


def test_request_abort_on_an_unknown_session_raises(journal: Journal, store: SqliteStore) -> None:
    assert_refused(store, RecordNotFoundError, lambda: journal.request_abort("nope"))


# -- the store refuses an async body ---------------------------------------------------------


def _event(seq: int) -> EventRecord:
    return EventRecord(session_id="s1", seq=seq, type="x", turn_id=None, data={}, at=T0)


def test_async_transaction_body_is_refused(journal: Journal, store: SqliteStore) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    before = dump(store)

    async def body(tx: Tx) -> None:
        tx.append_event(_event(99))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match="synchronous"):
            store.transact(body)
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert dump(store) == before


def test_body_that_writes_then_returns_a_coroutine_is_rolled_back(
    journal: Journal, store: SqliteStore
) -> None:
    journal.admit("s1", agent="agent", prompt="x")
    before = dump(store)

    async def later() -> None:
        return None

    def body(tx: Tx) -> object:
        tx.append_event(_event(99))
        return later()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError):
            store.transact(body)
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert dump(store) == before
    # The connection is usable afterwards: the refused transaction did not leak.
    journal.admit("s1", agent="agent", prompt="y")


# -- a whole turn ----------------------------------------------------------------------------


def test_happy_path_turn_event_log_is_gap_free(journal: Journal, clock: FakeClock) -> None:
    run, tasks = with_tasks(journal, "safe", "unsafe")
    for t in tasks:
        clock.advance(1)
        journal.start_tool(run.fence, t.id)
        journal.heartbeat(run.fence, ttl_s=TTL)
        journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, f"result of {t.tool}")
    journal.record_model_call(
        run.fence, run.turn_id, round_=1, text="all done", tool_calls=[], policies=[], usage=USAGE
    )
    journal.settle(run.fence, run.sub_id, "completed", text="all done")
    assert journal.release(run.fence) is False

    evs = events(journal)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert [e.type for e in evs] == [
        "session.created",
        "submission.admitted",
        "turn.started",
        "attempt.started",
        "model.completed",
        "tool.started",
        "tool.completed",
        "tool.started",
        "tool.completed",
        "model.completed",
        "submission.completed",
    ]
    s = session(journal)
    assert s.next_event_seq == len(evs) + 1
    assert s.status is SessionStatus.IDLE
    messages = journal.read(lambda r: r.messages("s1"))
    assert [m.seq for m in messages] == [1, 2, 3]
    assert s.next_message_seq == 4
    # Paging by cursor sees the same log.
    pages = [journal.read(lambda r, a=a: r.events("s1", after=a, limit=4)) for a in (0, 4, 8)]
    assert [e for page in pages for e in page] == evs


# -- invariants the journal should hold by itself -------------------------------------------
#
# The runtime currently never asks for these writes, but the journal is the one place that
# answers "what can this system write?": each of these is a durability-contract violation the
# journal accepts today.


def test_submissions_of_a_session_start_in_admission_order(
    journal: Journal, store: SqliteStore
) -> None:
    """DESIGN §3.2: one at a time, in admission order. A later submission cannot start first."""
    first = journal.admit("s1", agent="agent", prompt="one").submission
    second = journal.admit("s1", agent="agent", prompt="two").submission
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None
    assert_refused(
        store, IllegalTransitionError, lambda: journal.begin_attempt(fence, second.id, worker="w")
    )
    journal.begin_attempt(fence, first.id, worker="w")
    # ... nor while the first is still running.
    assert_refused(
        store, IllegalTransitionError, lambda: journal.begin_attempt(fence, second.id, worker="w")
    )


def test_unsafe_running_task_is_never_reexecuted(journal: Journal, store: SqliteStore) -> None:
    """DESIGN §3.5: an unsafe call found running is recorded outcome_unknown, never re-run."""
    run, (t,) = with_tasks(journal, "unsafe")
    journal.start_tool(run.fence, t.id)
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.start_tool(run.fence, t.id, reason="recovery"),
    )


@pytest.mark.parametrize("policy", ["idempotent", "unsafe"])
def test_only_a_safe_completed_task_is_refreshed(
    policy: str, journal: Journal, store: SqliteStore
) -> None:
    """completed -> running is the reuse=False refresh, which only a safe read may take."""
    run, (t,) = with_tasks(journal, policy)
    journal.start_tool(run.fence, t.id)
    journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, "done once")
    assert_refused(
        store, IllegalTransitionError, lambda: journal.start_tool(run.fence, t.id, reason="refresh")
    )


def test_no_tool_starts_in_a_settled_turn(journal: Journal, store: SqliteStore) -> None:
    """A settled turn leaves no task running (DESIGN §5): a refresh after settle is refused."""
    run, (t,) = with_tasks(journal, "safe")
    journal.start_tool(run.fence, t.id)
    journal.finish_tool(run.fence, t.id, ToolTaskStatus.COMPLETED, "ok")
    journal.settle(run.fence, run.sub_id, "completed", text="done")
    assert_refused(
        store, IllegalTransitionError, lambda: journal.start_tool(run.fence, t.id, reason="refresh")
    )


# -- progress (state, not history) -----------------------------------------------------------
# A running tool task's progress: fenced, no event, the session untouched, a bounded tail,
# refused once its run is over, cleared by every status change (the result replaces it).


def test_progress_of_a_running_task_is_recorded_without_an_event(
    journal: Journal, clock: FakeClock
) -> None:
    run, tasks = with_tasks(journal, "unsafe")
    journal.start_tool(run.fence, tasks[0].id)
    before_events, before_session = events(journal), session(journal)
    clock.set(T0 + 5)

    journal.record_progress(run.fence, tasks[0].id, run=1, text="10%")
    journal.record_progress(run.fence, tasks[0].id, run=1, text="10%20%")

    running = task(journal, tasks[0].id)
    assert (running.progress, running.progress_at) == ("10%20%", T0 + 5)
    assert running.status == ToolTaskStatus.RUNNING
    assert events(journal) == before_events  # state, not history
    assert session(journal) == before_session


def test_progress_keeps_only_the_tail(journal: Journal) -> None:
    run, tasks = with_tasks(journal, "safe")
    journal.start_tool(run.fence, tasks[0].id)
    text = "a" * MAX_PROGRESS_CHARS + "the end"

    journal.record_progress(run.fence, tasks[0].id, run=1, text=text)

    progress = task(journal, tasks[0].id).progress
    assert progress is not None and len(progress) == MAX_PROGRESS_CHARS
    assert progress.endswith("the end")


@pytest.mark.parametrize(
    "status", [ToolTaskStatus.COMPLETED, ToolTaskStatus.FAILED, ToolTaskStatus.OUTCOME_UNKNOWN]
)
def test_the_result_replaces_the_progress(
    journal: Journal, store: SqliteStore, status: ToolTaskStatus
) -> None:
    run, tasks = with_tasks(journal, "unsafe")
    journal.start_tool(run.fence, tasks[0].id)
    journal.record_progress(run.fence, tasks[0].id, run=1, text="half way")

    journal.finish_tool(run.fence, tasks[0].id, status, "the result")

    settled = task(journal, tasks[0].id)
    assert (settled.progress, settled.progress_at, settled.result) == (None, None, "the result")
    assert not store.read(lambda view: check_store(view, now=T0)).violations


def test_a_rerun_starts_without_the_dead_runs_progress(journal: Journal) -> None:
    run, tasks = with_tasks(journal, "safe")
    journal.start_tool(run.fence, tasks[0].id)
    journal.record_progress(run.fence, tasks[0].id, run=1, text="run 1 was here")

    rerun = journal.start_tool(run.fence, tasks[0].id, reason="recovery").task

    assert (rerun.runs, rerun.progress) == (2, None)


def test_progress_of_a_task_not_in_that_run_is_refused(
    journal: Journal, store: SqliteStore
) -> None:
    run, tasks = with_tasks(journal, "safe", "safe")
    # Not started yet: pending.
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.record_progress(run.fence, tasks[1].id, run=0, text="early"),
    )
    journal.start_tool(run.fence, tasks[0].id)
    # A late write of an earlier run, and one after the finish.
    journal.start_tool(run.fence, tasks[0].id, reason="recovery")
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.record_progress(run.fence, tasks[0].id, run=1, text="stale"),
    )
    journal.finish_tool(run.fence, tasks[0].id, ToolTaskStatus.COMPLETED, "ok")
    assert_refused(
        store,
        IllegalTransitionError,
        lambda: journal.record_progress(run.fence, tasks[0].id, run=2, text="late"),
    )


def test_the_checker_flags_a_settled_task_that_kept_its_progress(
    journal: Journal, store: SqliteStore
) -> None:
    run, tasks = with_tasks(journal, "safe")
    journal.start_tool(run.fence, tasks[0].id)
    settled = journal.finish_tool(run.fence, tasks[0].id, ToolTaskStatus.COMPLETED, "ok").task
    # What a writer that forgot to clear it would leave (the journal never does).
    store.transact(
        lambda tx: tx.put_tool_task(
            replace(settled, progress="stale", version=settled.version + 1),
            expected_version=settled.version,
        )
    )

    violations = store.read(lambda view: check_store(view, now=T0)).violations

    assert [v.code for v in violations] == ["progress-outlived-run"]
