"""What the lost-commit tests of every store share (test_redis_lost_commit.py,
test_dynamodb_lost_commit.py, test_postgres_lost_commit.py): a session admitted and claimed,
ready for a transition whose commit's answer the fault proxy loses, and the check that the
transition landed once."""

from __future__ import annotations

import time

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.store import Store
from fxdurable.testing.invariants import check_store

__all__ = ["assert_at_rest", "assert_landed_once", "claimed_session"]

SESSION = "s1"


def claimed_session(store: Store) -> tuple[Journal, Fence, str, int]:
    """s1 admitted and claimed: the journal, the fence, the submission's id and the session's
    version before its attempt begins."""
    journal = Journal(store, SystemClock(), RandomIds())
    sub = journal.admit(SESSION, agent="a", prompt="go").submission
    fence = journal.claim(SESSION, WorkerIdentity("h", 1), ttl_s=60)
    assert fence is not None
    claimed = store.read(lambda v: v.get_session(SESSION))
    assert claimed is not None
    return journal, fence, sub.id, claimed.version


def assert_landed_once(store: Store, sub_id: str, version_before: int, *, commits: int) -> None:
    """One attempt, every event once, the session moved by ``commits`` commits since
    ``version_before`` (one each: a transition applied twice moves it further)."""
    attempts = store.read(lambda v: list(v.attempts(sub_id)))
    assert [a.number for a in attempts] == [1]
    session = store.read(lambda v: v.get_session(SESSION))
    assert session is not None
    events = store.read(lambda v: list(v.events(SESSION)))
    assert [e.seq for e in events] == list(range(1, session.next_event_seq))
    assert session.version == version_before + commits, (version_before, session.version)


def assert_at_rest(store: Store) -> None:
    summary = store.read(lambda v: check_store(v, now=time.time(), at_rest=True))
    assert summary.violations == ()
