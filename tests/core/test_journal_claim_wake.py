"""``claim_wake``: a wake's claim, which reads what the wake decides from first and begins
the attempt in its own commit where nothing must come before it (``before_attempt``).

What it leaves must be exactly what ``claim`` then ``begin_attempt`` leave, in one commit
instead of two; where something comes first (a recovery, a question, an abort, a model
backoff, a webhook owed), it claims only, as ``claim`` does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fxdurable.core.journal import Journal, WorkerIdentity, before_attempt
from fxdurable.core.records import InputRequest, SubmissionRecord, TurnRecord
from fxdurable.core.states import AttemptStatus, SubmissionStatus, TurnStatus
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock

T0 = 1_000.0
TTL = 30.0
HOST_A = WorkerIdentity(host="host-a", pid=100)
HOST_B = WorkerIdentity(host="host-b", pid=100)


class CountingIds:
    def __init__(self) -> None:
        self._n = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._n)}"


class CountingStore(SqliteStore):
    """Counts the transactions (commits) the journal runs."""

    transactions = 0

    def transact(self, body: Any) -> Any:
        self.transactions += 1
        return super().transact(body)


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    stores: list[SqliteStore] = []

    def journal(name: str) -> tuple[Journal, CountingStore]:
        store = CountingStore(f"sqlite:///{tmp_path}/{name}.db")
        stores.append(store)
        return Journal(store, FakeClock(T0), CountingIds()), store

    yield journal
    for store in stores:
        store.close()


def _records(journal: Journal, sub_id: str) -> dict[str, Any]:
    """Everything a claim and an attempt write, versions aside (one commit bumps a row's
    version once where two commits bump it twice)."""

    def read(view: Any) -> dict[str, Any]:
        session = view.get_session("s1")
        sub = view.get_submission(sub_id)
        turn = view.get_turn(sub_id)
        return {
            "lease": session.lease,
            "submission": replace(sub, version=0),
            "turn": None if turn is None else replace(turn, version=0),
            "attempts": [replace(a, version=0) for a in view.attempts(sub_id)],
            "messages": [(m.seq, m.role, m.text, m.turn_id) for m in view.messages("s1")],
            "events": [(e.seq, e.type, e.turn_id, e.at, e.data) for e in view.events("s1")],
        }

    return journal.read(read)


def test_a_claim_that_begins_leaves_what_a_claim_and_an_attempt_leave_in_one_commit(
    make: Any,
) -> None:
    apart, apart_store = make("apart")
    merged, merged_store = make("merged")
    sub = apart.admit("s1", agent="agent", prompt="hello").submission
    assert merged.admit("s1", agent="agent", prompt="hello").submission.id == sub.id
    apart_store.transactions = merged_store.transactions = 0

    fence = apart.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None
    start = apart.begin_attempt(fence, sub.id, worker="w1", agent_version="v1")
    claimed = merged.claim_wake("s1", HOST_A, ttl_s=TTL, begin_as="w1", agent_version="v1")

    assert claimed is not None and claimed.start is not None
    assert claimed.fence == fence
    assert (apart_store.transactions, merged_store.transactions) == (2, 1)
    assert _records(merged, sub.id) == _records(apart, sub.id)
    # The start is the one begin_attempt returns (the records as written, the version
    # included: the driver's next commit writes from them).
    assert replace(claimed.start, submission=replace(claimed.start.submission, version=0)) == (
        replace(start, submission=replace(start.submission, version=0))
    )
    assert claimed.start.submission == merged.read(lambda v: v.get_submission(sub.id))
    assert claimed.interrupted is False
    # The unsettled submissions as they were before the attempt began.
    assert [s.status for s in claimed.unsettled] == [SubmissionStatus.QUEUED]


def test_without_begin_as_it_claims_only(make: Any) -> None:
    journal, _ = make("j")
    sub = journal.admit("s1", agent="agent", prompt="hello").submission

    claimed = journal.claim_wake("s1", HOST_A, ttl_s=TTL)

    assert claimed is not None and claimed.start is None
    assert [s.id for s in claimed.unsettled] == [sub.id]
    assert journal.read(lambda v: v.attempts(sub.id)) == []


def test_a_recovery_claims_alone_and_says_so(make: Any) -> None:
    """An attempt left running: the claim commits alone (``recovery.after-claim`` fires
    between it and the attempt that records the old one interrupted)."""
    journal, _ = make("j")
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    fence = journal.claim("s1", HOST_A, ttl_s=TTL)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w1")

    claimed = journal.claim_wake(
        "s1", HOST_A, ttl_s=TTL, holder_is_dead=lambda host, pid: False, begin_as="w2"
    )
    assert claimed is None  # the live holder keeps it

    journal._clock.advance(TTL + 1)  # type: ignore[attr-defined]
    claimed = journal.claim_wake("s1", HOST_B, ttl_s=TTL, begin_as="w2")

    assert claimed is not None
    assert (claimed.interrupted, claimed.start) == (True, None)
    (attempt,) = journal.read(lambda v: v.attempts(sub.id))
    assert attempt.status is AttemptStatus.RUNNING  # the attempt that follows interrupts it


def test_a_session_held_by_a_live_worker_is_not_claimed_and_nothing_is_written(
    make: Any,
) -> None:
    journal, _ = make("j")
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    first = journal.claim("s1", HOST_A, ttl_s=TTL)
    before = _records(journal, sub.id)

    assert journal.claim_wake("s1", HOST_B, ttl_s=TTL, begin_as="w2") is None

    assert _records(journal, sub.id) == before
    assert first is not None and before["lease"].owner == first.owner


def test_a_submission_aborted_before_it_ran_is_claimed_but_not_begun(make: Any) -> None:
    journal, _ = make("j")
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    journal.request_abort("s1")

    claimed = journal.claim_wake("s1", HOST_A, ttl_s=TTL, begin_as="w1")

    assert claimed is not None and claimed.start is None
    assert claimed.unsettled[0].abort_requested
    assert journal.read(lambda v: v.get_turn(sub.id)) is None


def _queued() -> SubmissionRecord:
    return SubmissionRecord(
        id="sub-1",
        session_id="s1",
        seq=1,
        request_id="r",
        prompt="hello",
        status=SubmissionStatus.QUEUED,
        created_at=T0,
    )


def _turn() -> TurnRecord:
    return TurnRecord(id="sub-1", session_id="s1", submission_id="sub-1", status=TurnStatus.RUNNING)


@pytest.mark.parametrize(
    ("sub", "turn", "expected"),
    [
        (_queued(), None, "begin"),
        (None, None, "begin"),
        (replace(_queued(), status=SubmissionStatus.RUNNING), _turn(), "begin"),
        (replace(_queued(), abort_requested=True), None, "settle_aborted"),
        # A running submission with an abort intent begins: its turn settles it at the
        # first boundary, with what it has recorded.
        (
            replace(_queued(), status=SubmissionStatus.RUNNING, abort_requested=True),
            _turn(),
            "begin",
        ),
        (
            replace(
                _queued(),
                status=SubmissionStatus.RUNNING,
                input_request=InputRequest(question="ok?", about="tool", asked_at=T0),
            ),
            _turn(),
            "wait_for_answer",
        ),
        (
            replace(_queued(), status=SubmissionStatus.RUNNING),
            replace(_turn(), model_retry_at=T0 + 5),
            "back_off",
        ),
    ],
)
def test_what_comes_before_an_attempt(
    sub: SubmissionRecord | None, turn: TurnRecord | None, expected: str
) -> None:
    assert before_attempt(sub, turn) == expected
