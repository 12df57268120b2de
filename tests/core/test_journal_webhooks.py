"""Settlement webhooks in the journal: owed from the settle commit, kept through retries,
settled once (delivered or abandoned), and the session at rest only when nothing is owed —
on every store."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_matrix import STORES, open_store

from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import PendingWebhook, SessionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.errors import LeaseLostError
from fxdurable.testing import FakeClock
from fxdurable.testing.invariants import check_store

WORKER = WorkerIdentity(host="host-a", pid=100)
OTHER = WorkerIdentity(host="host-b", pid=200)


class Ids:
    def __init__(self) -> None:
        self._n = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._n)}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000.0)


@pytest.fixture(params=STORES)
def journal(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Journal]:
    store = open_store(request, tmp_path)
    yield Journal(store, clock, Ids())
    store.close()


def settled_with_webhook(journal: Journal, prompt: str = "hello") -> tuple[Fence, str]:
    sub = journal.admit("s1", agent="agent", prompt=prompt).submission
    fence = journal.claim("s1", WORKER, ttl_s=30.0)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w1")
    journal.settle(fence, sub.id, "completed", text="done", webhook=True)
    return fence, sub.id


def session(journal: Journal) -> SessionRecord:
    record = journal.read(lambda v: v.get_session("s1"))
    assert record is not None
    return record


def types(journal: Journal) -> list[str]:
    return [e.type for e in journal.read(lambda v: list(v.events("s1")))]


def test_a_settlement_owes_its_webhook_and_keeps_the_session_active(journal: Journal) -> None:
    _, sub_id = settled_with_webhook(journal)
    assert session(journal).webhooks == (PendingWebhook(submission_id=sub_id),)
    assert session(journal).status == SessionStatus.ACTIVE
    assert not journal.read(lambda v: check_store(v, now=1_000.0)).violations


def test_without_a_webhook_the_session_rests_at_once(journal: Journal) -> None:
    sub = journal.admit("s1", agent="agent", prompt="hello").submission
    fence = journal.claim("s1", WORKER, ttl_s=30.0)
    assert fence is not None
    journal.begin_attempt(fence, sub.id, worker="w1")
    journal.settle(fence, sub.id, "completed", text="done")
    assert session(journal).webhooks == ()
    assert session(journal).status == SessionStatus.IDLE


def test_delivery_rests_the_session_and_a_repeat_records_nothing(journal: Journal) -> None:
    fence, sub_id = settled_with_webhook(journal)
    journal.webhook_failed(fence, sub_id, error="HTTP 503", retry_at=1_010.0)
    assert session(journal).webhooks == (
        PendingWebhook(submission_id=sub_id, attempts=1, next_at=1_010.0),
    )
    assert session(journal).status == SessionStatus.ACTIVE
    journal.webhook_delivered(fence, sub_id, status=204)
    journal.webhook_delivered(fence, sub_id, status=204)  # a retried commit: nothing owed
    assert session(journal).webhooks == ()
    assert session(journal).status == SessionStatus.IDLE
    delivered = [e for e in journal.read(lambda v: list(v.events("s1")))][-1]
    assert delivered.type == "webhook.delivered"
    assert delivered.data == {"submission": sub_id, "attempts": 2, "status": 204}
    assert types(journal).count("webhook.delivered") == 1
    assert not journal.read(lambda v: check_store(v, now=1_000.0)).violations


def test_abandoning_records_the_last_error(journal: Journal) -> None:
    fence, sub_id = settled_with_webhook(journal)
    journal.webhook_failed(fence, sub_id, error="ConnectError", retry_at=None)
    last = journal.read(lambda v: list(v.events("s1")))[-1]
    assert last.type == "webhook.abandoned"
    assert last.data == {"submission": sub_id, "attempts": 1, "error": "ConnectError"}
    assert session(journal).status == SessionStatus.IDLE


def test_a_session_with_work_queued_stays_active_after_its_delivery(journal: Journal) -> None:
    fence, sub_id = settled_with_webhook(journal)
    journal.admit("s1", agent="agent", prompt="next")
    journal.webhook_delivered(fence, sub_id, status=200)
    assert session(journal).status == SessionStatus.ACTIVE
    assert not journal.read(lambda v: check_store(v, now=1_000.0)).violations


def test_a_worker_that_lost_the_session_cannot_record_a_delivery(
    journal: Journal, clock: FakeClock
) -> None:
    fence, sub_id = settled_with_webhook(journal)
    journal.release(fence)
    assert journal.claim("s1", OTHER, ttl_s=30.0) is not None
    with pytest.raises(LeaseLostError):
        journal.webhook_delivered(fence, sub_id, status=200)
    assert session(journal).webhooks == (PendingWebhook(submission_id=sub_id),)
