"""What ``GET /sessions`` costs on DynamoDB, in requests (moto server mode, counted by
botocore's own hook): two for the list, whether its sessions had one turn or many, and two
more per active session on the page (plus one batch), however long its history."""

from __future__ import annotations

import pytest
from aws_support import aws_session
from dynamo_support import dynamo_url, request_counter
from starlette.datastructures import QueryParams

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal, WorkerIdentity
from fxdurable.http.scoping import session_key
from fxdurable.http.sessions_list import SessionsQuery, list_sessions
from fxdurable.stores.dynamodb import DynamoStore

pytestmark = pytest.mark.aws
WORKER = WorkerIdentity("h", 1)
SESSIONS = 2


def _fill(url: str, turns: int, active: int) -> None:
    store = DynamoStore(url, session=aws_session())
    journal = Journal(store, SystemClock(), RandomIds())
    try:
        for n in range(SESSIONS):
            key = session_key("alice", f"s{n}")
            for _ in range(turns):
                sub = journal.admit(key, agent="a", prompt="go", owner="alice").submission
                fence = journal.claim(key, WORKER, ttl_s=30)
                assert fence is not None
                journal.begin_attempt(fence, sub.id, worker="w")
                journal.settle(fence, sub.id, "completed", text="done")
                journal.release(fence)
        for n in range(active):
            journal.admit(session_key("alice", f"a{n}"), agent="a", prompt="go", owner="alice")
        journal.admit("bob/other", agent="a", prompt="go", owner="bob")
    finally:
        store.close()


def _listing_requests(url: str) -> tuple[int, int]:
    """(requests, rows) of alice's first page, on a store that has read nothing yet."""
    store = DynamoStore(url, session=aws_session())
    query = SessionsQuery.parse(QueryParams(""))
    try:
        with request_counter(store) as sent:
            reply = store.read(lambda v: list_sessions(v, "alice", query, False))
        return len(sent), len(reply.sessions)
    finally:
        store.close()


def test_listing_costs_two_requests_and_one_more_per_active_session(moto_server: str) -> None:
    short, long = dynamo_url(moto_server), dynamo_url(moto_server)
    _fill(short, turns=1, active=0)
    _fill(long, turns=3, active=2)
    short_cost, long_cost = _listing_requests(short), _listing_requests(long)
    # The session index and one batch of heads, whether each has one turn or three.
    assert short_cost == (2, SESSIONS)
    # An active session: its head and its unsettled index (GetItem, Query); then one batch
    # of the page's unsettled submissions.
    assert long_cost == (2 + 2 * 2 + 1, SESSIONS + 2)
