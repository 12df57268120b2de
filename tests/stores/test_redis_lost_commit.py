"""A commit whose answer is lost, on Redis: it lands once and the call succeeds.

A fault-injecting TCP proxy (:class:`fxdurable.testing.faults.FaultProxy`) stands between the
store and redis-server. Armed, it lets the next ``EVALSHA`` of the commit script through to the
server (which runs it) and then closes the connection without the answer (``drop``), or holds
the answer until the client's ``socket_timeout`` gives up (``stall``). The store sends the same
commit, with the same token, on a new connection; the script finds the token recorded and
answers what it did the first time. Without the token the resend would meet its own first
send: the session's version moved, so the body runs again from fresh reads and the transition
is applied a second time (or refused as a conflict) — the last test shows that this happens,
so the first ones would catch a store that lost its token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from fault_support import fault_proxy, through_proxy
from lost_commit_support import assert_at_rest, assert_landed_once, claimed_session

from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.store import Tx
from fxdurable.errors import FxDurableError
from fxdurable.stores import _redis_cached_tx
from fxdurable.stores._redis_wire import SCRIPT_SHA
from fxdurable.stores.redis import RedisStore
from fxdurable.testing.faults import Answer, FaultProxy

pytestmark = pytest.mark.redis

COMMIT = SCRIPT_SHA.encode()  # in every EVALSHA of lua/commit.lua


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultProxy]:
    with fault_proxy(redis_url, 6379) as proxy:
        yield proxy


def _proxied(redis_url: str, proxy: FaultProxy) -> RedisStore:
    url = through_proxy(redis_url, proxy)
    return RedisStore(f"{url}&socket_timeout=1")


def _lose_begin_attempt(store: RedisStore, proxy: FaultProxy, how: Answer) -> tuple[str, int]:
    """Admit and claim s1, begin its attempt with the commit's answer lost, settle, release:
    the submission and the session's version before the attempt."""
    journal, fence, sub_id, version = claimed_session(store)
    proxy.lose_answer(COMMIT, how)
    try:
        journal.begin_attempt(fence, sub_id, worker="w")
    finally:
        assert proxy.lost == 1, "the proxy never faulted the commit: the test proves nothing"
    if how == "late":  # the first send reaches the server after its resend was answered
        assert proxy.landed_late.wait(10), "the held commit never reached the server"
    journal.settle(fence, sub_id, "completed", text="done")
    journal.release(fence)
    return sub_id, version


def _once(store: RedisStore, sub_id: str, version_before: int) -> None:
    """One attempt, every event once, the session moved by each transition's one commit."""
    # begin_attempt, settle and release: three commits after the claim, not four.
    assert_landed_once(store, sub_id, version_before, commits=3)
    assert_at_rest(store)


@pytest.mark.parametrize("how", ["drop", "stall", "late"])
def test_a_commit_whose_answer_is_lost_lands_once(
    redis_url: str, proxy: FaultProxy, how: Answer
) -> None:
    store = _proxied(redis_url, proxy)
    try:
        _once(store, *_lose_begin_attempt(store, proxy, how))
    finally:
        store.close()


@pytest.mark.parametrize("how", ["drop", "late"])
def test_a_lost_commit_on_the_watch_path_is_found_or_fenced_by_its_token(
    redis_url: str, proxy: FaultProxy, how: Answer
) -> None:
    """A body that lists sessions commits with WATCH/MULTI/EXEC, whose writes cannot be sent
    again: the store fences the token. Dropped after it ran, the fence finds the commit landed
    and the body ran once; held until after the fence (late), the fence wins, the body runs
    again from fresh reads, and the first send, arriving last, applies nothing."""
    store = _proxied(redis_url, proxy)
    try:
        Journal(store, SystemClock(), RandomIds()).admit("s1", agent="a", prompt="go")
        runs: list[int] = []

        def body(tx: Tx) -> int:
            assert [s.id for s in tx.list_sessions()] == ["s1"]  # the cached path stops here
            runs.append(1)
            session = tx.get_session("s1")
            assert session is not None
            new = dataclasses.replace(session, version=session.version + 1, steering=("hi",))
            tx.put_session(new, expected_version=session.version)
            return new.version

        before = store.read(lambda v: v.get_session("s1"))
        assert before is not None
        proxy.lose_answer(COMMIT, how)
        version = store.transact(body)
        assert proxy.lost == 1
        if how == "late":
            assert proxy.landed_late.wait(10), "the held commit never reached the server"
        assert runs == ([1] if how == "drop" else [1, 1])
        stored = store.read(lambda v: v.get_session("s1"))
        assert stored is not None and (stored.version, stored.steering) == (version, ("hi",))
        assert version == before.version + 1  # one commit landed, whichever run made it
    finally:
        store.close()


def test_without_its_token_a_resent_commit_does_not_land_once(
    redis_url: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same lost answer with the token taken away (a script that records nothing): the
    resend cannot learn what the first send did, and the transition is not applied exactly
    once. What the tests above assert is what the token buys."""
    monkeypatch.setattr(_redis_cached_tx, "new_token", lambda: "")
    store = _proxied(redis_url, proxy)
    try:
        try:
            sub_id, version = _lose_begin_attempt(store, proxy, "drop")
        except FxDurableError:
            return  # refused (a conflict with its own first send): not landed once either
        with pytest.raises(AssertionError):
            _once(store, sub_id, version)  # measured: attempts [1, 2], the attempt began twice
    finally:
        store.close()
