"""A stream cut mid-way continues from its durable partial (DESIGN §4, issue 9 §3).

The journal is driven as workers would, each vanishing without a word (its lease expires on a
fake clock and the next worker claims the session), so every crash shape is laid out here step
by step; the crash suite kills real processes at ``model.mid-stream``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from fxdurable.core.clock import RandomIds
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import ErrorInfo, Usage
from fxdurable.core.store import Tx
from fxdurable.runtime.history import build_history, conversation
from fxdurable.runtime.models.base import INTERRUPTED_NOTE, ChatMessage, without_interruptions
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock, check_store

SESSION = "s1"


class Workers:
    """Workers that die one after another: each claims the session once its predecessor's
    lease has expired and begins an attempt, as a recovering worker does."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.clock = FakeClock()
        self.journal = Journal(store, self.clock, RandomIds())
        self.sub = self.journal.admit(SESSION, agent="eng", prompt="write a poem").submission
        self._pid = 100

    def next(self) -> Fence:
        self.clock.advance(60)  # the previous owner's lease is long gone
        self._pid += 1
        fence = self.journal.claim(SESSION, WorkerIdentity(host="h", pid=self._pid), ttl_s=10)
        assert fence is not None
        self.journal.begin_attempt(fence, self.sub.id, worker=f"h:{self._pid}")
        return fence

    def events(self, type_: str) -> list[dict[str, object]]:
        evs = self.journal.read(lambda v: v.events(SESSION))
        return [dict(e.data) for e in evs if e.type == type_]

    def model_view(self) -> list[ChatMessage]:
        return self.journal.read(
            lambda v: build_history(v.messages(SESSION), v.session_tool_tasks(SESSION)).messages
        )

    def people_view(self) -> list[ChatMessage]:
        return self.journal.read(lambda v: conversation(v, SESSION))


@pytest.fixture
def w(tmp_path: Path) -> Iterator[Workers]:
    store = SqliteStore(f"sqlite:///{tmp_path}/fx.db")
    try:
        yield Workers(store)
    finally:
        store.close()


def test_every_crash_shape_closes_a_cut_stream_out_once(w: Workers) -> None:
    first = w.next()
    w.journal.record_partial(first, w.sub.id, round_=0, text="Roses are")
    w.journal.record_partial(first, w.sub.id, round_=0, text=" red,")

    # Cut mid-stream: recovery closes the partial out as an interrupted entry.
    w.next()
    assert w.events("model.interrupted") == [{"round": 0, "text": "Roses are red,"}]
    cut = ChatMessage(role="assistant", text="Roses are red,", interrupted=True)
    note = ChatMessage(role="user", text=INTERRUPTED_NOTE)
    prompt = ChatMessage(role="user", text="write a poem")
    assert w.model_view() == [prompt, cut, note]
    assert w.people_view() == [prompt, cut]  # people see the cut reply, not the note

    # Killed again before streaming anything: nothing new to close out.
    w.next()
    assert len(w.events("model.interrupted")) == 1

    # Killed mid-stream again in the same round: at most one entry per round, and no
    # partial is left behind for later recoveries.
    third = w.next()
    w.journal.record_partial(third, w.sub.id, round_=0, text=" violets")
    last = w.next()
    assert len(w.events("model.interrupted")) == 1
    assert w.model_view() == [prompt, cut, note]
    turn = w.journal.read(lambda v: v.get_turn(w.sub.id))
    assert turn is not None and turn.partial_text == ""

    # The round's answer, when it comes, follows the note; the note stays where it was
    # (the same prefix in every later request).
    w.journal.record_model_call(
        last,
        w.sub.id,
        round_=0,
        text="Roses are red, violets are blue.",
        tool_calls=[],
        policies=[],
        usage=Usage(),
    )
    answer = ChatMessage(role="assistant", text="Roses are red, violets are blue.")
    assert w.model_view() == [prompt, cut, note, answer]
    assert w.people_view() == [prompt, cut, answer]
    assert without_interruptions(w.model_view()) == [prompt, answer]


def test_a_stream_that_failed_and_was_retried_leaves_no_partial(w: Workers) -> None:
    """A transient model error is no crash: its retry streams the round afresh, so a later
    crash closes out only what the retry streamed."""
    fence = w.next()
    w.journal.record_partial(fence, w.sub.id, round_=0, text="Roses")
    w.journal.record_model_error(
        fence, w.sub.id, round_=0, error=ErrorInfo(code="model_unavailable", message="503")
    )
    w.journal.record_partial(fence, w.sub.id, round_=0, text="Tulips")
    w.next()
    assert w.events("model.interrupted") == [{"round": 0, "text": "Tulips"}]


def test_the_checker_refuses_a_round_closed_out_twice(w: Workers) -> None:
    fence = w.next()
    w.journal.record_partial(fence, w.sub.id, round_=0, text="Roses")
    w.next()

    def codes() -> list[str]:
        summary = w.journal.read(lambda v: check_store(v, now=w.clock.now()))
        return [v.code for v in summary.violations]

    assert "interrupted-not-once" not in codes()
    (closed,) = [
        e for e in w.journal.read(lambda v: v.events(SESSION)) if e.type == "model.interrupted"
    ]

    def forge(tx: Tx) -> None:  # what a journal closing a round out twice would write
        session = tx.get_session(SESSION)
        assert session is not None
        tx.append_event(replace(closed, seq=session.next_event_seq))
        tx.put_session(
            replace(
                session, next_event_seq=session.next_event_seq + 1, version=session.version + 1
            ),
            expected_version=session.version,
        )

    w.store.transact(forge)
    assert "interrupted-not-once" in codes()
