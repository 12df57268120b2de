"""A question's expiry against a late answer, through the journal on every store: the expiry
is one recorded transition (``Journal.expire_input``), ordered against ``answer_input`` by the
session's version check, so exactly one of them answers, in either order and in a true race
of two threads released at once (SQLite, Redis on a real redis-server, DynamoDB on moto)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_matrix import STORES, open_store

from fxdurable.core.asking import expired_question, question_due_at, waits_for_input
from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import SubmissionRecord, ToolCallRequest, ToolTaskRecord, Usage
from fxdurable.core.store import Store
from fxdurable.errors import InvalidAnswerError, NoPendingQuestionError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock

RACES = 8  # true races per store: each a fresh session, both writers released at once


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = open_store(request, tmp_path)
    yield opened
    opened.close()


def _asked(
    journal: Journal, session: str, *, timeout_s: float, on_timeout: str = "deny"
) -> tuple[Fence, ToolTaskRecord]:
    """Session ``session``'s turn asks about its one pending call, with a timeout, and the
    worker lets go, as a worker does."""
    sub = journal.admit(session, agent="a", prompt="go").submission
    fence = journal.claim(session, WorkerIdentity("h", 1), ttl_s=30)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w")
    call = ToolCallRequest(name="deploy", arguments='{"version": "1"}')
    (task,) = journal.record_model_call(
        fence, sub.id, round_=0, text="", tool_calls=[call], policies=["unsafe"], usage=Usage()
    ).tasks
    journal.request_input(
        fence,
        sub.id,
        question="May I?",
        about="tool",
        task_id=task.id,
        timeout_s=timeout_s,
        on_timeout=on_timeout,  # type: ignore[arg-type]
    )
    assert journal.release(fence) is False  # a waiting turn is no work for a wake
    return fence, task


def _waiting(store: Store, session: str) -> SubmissionRecord:
    (sub,) = store.read(lambda v: v.unsettled_submissions(session))
    return sub


def _answered_events(store: Store, session: str) -> list[str]:
    return [
        str(e.data["answer"])
        for e in store.read(lambda v: v.events(session))
        if e.type == "input.answered"
    ]


def test_the_timer_is_on_the_session_and_expires_only_once_due(store: Store) -> None:
    clock = FakeClock()
    journal = Journal(store, clock, RandomIds())
    _, task = _asked(journal, "s1", timeout_s=30)
    waiting = _waiting(store, "s1")
    assert question_due_at(waiting) == clock.now() + 30
    clock.advance(29.5)
    assert not expired_question(waiting, clock.now())
    assert journal.expire_input("s1") is None  # not due by the journal's clock: no write
    assert waits_for_input(_waiting(store, "s1"))
    clock.advance(1)
    expired = journal.expire_input("s1")
    assert expired is not None and not waits_for_input(expired)
    got = store.read(lambda v: v.get_tool_task(task.id))
    assert got is not None and got.answer is not None
    assert (got.answer.kind, got.answer.timed_out, got.answer.reason) == (
        "deny",
        True,
        "no answer within 30s",
    )
    assert journal.expire_input("s1") is None  # applied once
    assert _answered_events(store, "s1") == ["deny"]


def test_an_answer_first_leaves_the_expiry_nothing_to_do(store: Store) -> None:
    clock = FakeClock()
    journal = Journal(store, clock, RandomIds())
    _, task = _asked(journal, "s1", timeout_s=10, on_timeout="allow")
    clock.advance(11)  # due, but the person's answer lands first
    journal.answer_input("s1", "deny", reason="not now", task_id=task.id)
    assert journal.expire_input("s1") is None
    got = store.read(lambda v: v.get_tool_task(task.id))
    assert got is not None and got.answer is not None
    assert (got.answer.kind, got.answer.timed_out, got.answer.reason) == ("deny", False, "not now")
    assert _answered_events(store, "s1") == ["deny"]


def test_an_expiry_first_refuses_the_late_answer(store: Store) -> None:
    clock = FakeClock()
    journal = Journal(store, clock, RandomIds())
    _, task = _asked(journal, "s1", timeout_s=10, on_timeout="allow")
    clock.advance(10)
    assert journal.expire_input("s1") is not None
    with pytest.raises(NoPendingQuestionError):
        journal.answer_input("s1", "deny", reason="too late", task_id=task.id)
    got = store.read(lambda v: v.get_tool_task(task.id))
    assert got is not None and got.answer is not None
    assert (got.answer.kind, got.answer.timed_out) == ("allow", True)
    assert _answered_events(store, "s1") == ["allow"]


def _race_once(store: Store, journal: Journal, clock: FakeClock, session: str) -> str:
    """One true race on a fresh session: a person's allow and the due expiry, released at
    once from two threads. Returns the winner, checked against the records."""
    _, task = _asked(journal, session, timeout_s=5)
    clock.advance(5)  # due: both writers may answer
    start = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def answer() -> None:
        start.wait()
        try:
            journal.answer_input(session, "allow", task_id=task.id)
            outcome["answer"] = "won"
        except NoPendingQuestionError:
            outcome["answer"] = "lost"

    def expire() -> None:
        start.wait()
        outcome["expire"] = "lost" if journal.expire_input(session) is None else "won"

    threads = [threading.Thread(target=answer), threading.Thread(target=expire)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcome.values()) == ["lost", "won"], outcome
    winner = "answer" if outcome["answer"] == "won" else "expire"
    got = store.read(lambda v: v.get_tool_task(task.id))
    assert got is not None and got.answer is not None
    # The record says who won: a person's allow, or the expiry's deny.
    assert (got.answer.kind, got.answer.timed_out) == (
        ("allow", False) if winner == "answer" else ("deny", True)
    )
    assert len(_answered_events(store, session)) == 1
    return winner


def test_a_true_race_of_answer_and_expiry_records_exactly_one(store: Store) -> None:
    clock = FakeClock()
    journal = Journal(store, clock, RandomIds())
    winners = [_race_once(store, journal, clock, f"race{n}") for n in range(RACES)]
    print(f"{type(store).__name__}: winners {winners}")


def test_the_journal_refuses_a_timeout_that_is_not_positive_or_an_unknown_fallback(
    tmp_path: Path,
) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/bad.db")
    journal = Journal(store, FakeClock(), RandomIds())
    with pytest.raises(InvalidAnswerError):
        _asked(journal, "s1", timeout_s=0)
    with pytest.raises(InvalidAnswerError):
        _asked(journal, "s2", timeout_s=5, on_timeout="maybe")
    store.close()


def test_fxdurable_check_flags_a_question_long_past_its_timer(tmp_path: Path) -> None:
    import io
    import time

    from fxdurable.cli.check import run_check
    from fxdurable.testing.invariants import EXPIRED_QUESTION_GRACE_S, check_store

    store = SqliteStore(f"sqlite:///{tmp_path}/check.db")
    clock = FakeClock(start=time.time() - 3600)  # asked an hour ago, by the store's clock
    journal = Journal(store, clock, RandomIds())
    _asked(journal, "s1", timeout_s=30)
    asked_at = clock.now()
    within = store.read(lambda v: check_store(v, now=asked_at + 30 + EXPIRED_QUESTION_GRACE_S - 1))
    assert within.violations == ()  # due, but within the scan's grace
    out = io.StringIO()
    assert run_check(store, out=out) == 1
    assert "question-expired" in out.getvalue() and "still waits on a question" in out.getvalue()
    clock.set(time.time())
    assert journal.expire_input("s1") is not None
    out = io.StringIO()
    assert run_check(store, out=out) == 0, out.getvalue()
    store.close()


def test_a_question_without_a_timer_keeps_the_bytes_it_was_stored_with() -> None:
    """The timer's fields are left out of the encoding at their defaults (recordcodec's
    OMIT_DEFAULT): records written before timers existed re-encode to the same bytes."""
    from fxdurable.core.recordcodec import decode, encode
    from fxdurable.core.records import InputAnswer, InputRequest

    plain = InputRequest(
        question="q", about="tool", asked_at=1.0, answer=InputAnswer(kind="allow", at=2.0)
    )
    assert "expires_at" not in encode(plain) and "timed_out" not in encode(plain)
    timed = InputRequest(
        question="q",
        about="tool",
        asked_at=1.0,
        expires_at=31.0,
        on_timeout="fail",
        answer=InputAnswer(kind="deny", at=31.0, timed_out=True),
    )
    assert decode(InputRequest, encode(timed)) == timed
    assert decode(InputRequest, encode(plain)) == plain
