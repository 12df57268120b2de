"""The four record primitives, called directly: what a new store must get right first.

Part of :class:`~fxdurable.testing.store_contract.StoreContract`. A store supplies ``get``,
``range``, ``put`` and ``append`` over the kinds of :mod:`fxdurable.core.kinds`; the named
reads and writes the rest of the suite exercises are derived from these four in core
(:class:`~fxdurable.core.store.DerivedTx`), so a failure here is the one to fix before any
other."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from fxdurable.core.kinds import (
    ATTEMPT,
    EVENT,
    KINDS,
    MESSAGE,
    MODEL_CALL,
    SESSION,
    SUBMISSION,
    TOOL_TASK,
    TURN,
    Key,
    Kind,
)
from fxdurable.core.records import AttemptRecord, MessageRecord, ModelCallRecord, TurnRecord
from fxdurable.core.states import (
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    SubmissionStatus,
    TurnStatus,
)
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.errors import ConflictError
from fxdurable.testing.store_contract.builders import (
    a_session,
    a_submission,
    a_task,
    an_event,
    look,
    write,
)

__all__ = ["PrimitiveContract", "one_of_each"]


def _attempt(number: int = 1, submission_id: str = "s1-sub1") -> AttemptRecord:
    return AttemptRecord(
        submission_id=submission_id,
        number=number,
        status=AttemptStatus.RUNNING,
        worker="w",
        started_at=1.0,
    )


def _model_call(round_: int = 0, turn_id: str = "t1") -> ModelCallRecord:
    status = ModelCallStatus.COMPLETED
    return ModelCallRecord(
        turn_id=turn_id, round=round_, status=status, text=str(round_), created_at=1.0
    )


def _message(seq: int = 1, sid: str = "s1") -> MessageRecord:
    return MessageRecord(session_id=sid, seq=seq, turn_id="t1", role="user", text=f"m{seq}")


def _event(seq: int = 1) -> Any:
    return an_event(seq=seq)


def _each(records: Any) -> Callable[[Tx], None]:
    """A body writing ``records``, each with its primitive."""

    def body(tx: Tx) -> None:
        for record in records:
            _store_one(tx, record)

    return body


def _turn(tid: str = "t1") -> TurnRecord:
    return TurnRecord(id=tid, session_id="s1", submission_id="s1-sub1", status=TurnStatus.RUNNING)


def one_of_each() -> dict[str, Any]:
    """A valid record of every kind, by kind name."""
    return {
        "session": a_session(),
        "submission": a_submission(),
        "attempt": _attempt(),
        "turn": _turn(),
        "model_call": _model_call(),
        "tool_task": a_task(),
        "message": _message(),
        "event": an_event(),
    }


def _store_one(tx: Tx, record: Any) -> None:
    kind = next(k for k in KINDS if isinstance(record, k.cls))
    if kind.versioned:
        tx.put(record, expected_version=None)
    else:
        tx.append(record)


def _keys(records: Any) -> list[Key]:
    return [next(k for k in KINDS if isinstance(r, k.cls)).key_of(r) for r in records]


class PrimitiveContract:
    """See the module."""

    @pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
    def test_get_returns_what_put_or_append_wrote(self, store: Store, kind: Kind[Any]) -> None:
        record = one_of_each()[kind.name]
        key = kind.key_of(record)
        assert look(store, lambda r: r.get(kind, key)) is None
        write(store, lambda tx: _store_one(tx, record))
        assert look(store, lambda r: r.get(kind, key)) == record
        other = (*key[:-1], 99) if isinstance(key[-1], int) else (*key[:-1], "nobody")
        assert look(store, lambda r: r.get(kind, other)) is None

    @pytest.mark.parametrize("kind", [k for k in KINDS if k.versioned], ids=lambda k: k.name)
    def test_put_checks_the_version(self, store: Store, kind: Kind[Any]) -> None:
        record = one_of_each()[kind.name]
        key = kind.key_of(record)
        write(store, lambda tx: tx.put(record, expected_version=None))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put(record, expected_version=None))
        newer = dataclasses.replace(record, version=2)
        write(store, lambda tx: tx.put(newer, expected_version=1))
        with pytest.raises(ConflictError):  # a writer that read version 1 comes too late
            write(
                store, lambda tx: tx.put(dataclasses.replace(record, version=2), expected_version=1)
            )
        with pytest.raises(ConflictError):  # nothing to update
            absent = one_of_each()[kind.name]
            write(store, lambda tx: tx.put(_elsewhere(absent), expected_version=1))
        assert look(store, lambda r: r.get(kind, key)) == newer

    @pytest.mark.parametrize("kind", [k for k in KINDS if not k.versioned], ids=lambda k: k.name)
    def test_append_inserts_once(self, store: Store, kind: Kind[Any]) -> None:
        record = one_of_each()[kind.name]
        write(store, lambda tx: tx.append(record))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.append(record))
        assert look(store, lambda r: r.get(kind, kind.key_of(record))) == record

    def test_put_and_append_refuse_the_wrong_kind(self, store: Store) -> None:
        with pytest.raises(TypeError, match="append-only"):
            write(store, lambda tx: tx.put(an_event(), expected_version=None))
        with pytest.raises(TypeError, match="versioned"):
            write(store, lambda tx: tx.append(a_session()))
        with pytest.raises(TypeError, match="not a kind of stored record"):
            write(store, lambda tx: tx.append(object()))
        assert look(store, lambda r: r.get(EVENT, ("s1", 1))) is None
        assert look(store, lambda r: r.get(SESSION, ("s1",))) is None

    def test_every_index_selects_and_orders(self, store: Store) -> None:
        sessions = [
            a_session("s2"),
            a_session("s1"),
            a_session("s3", status=SessionStatus.IDLE),
        ]
        subs = [
            a_submission("s1", 2, status=SubmissionStatus.RUNNING),
            a_submission("s1", 1, status=SubmissionStatus.COMPLETED),
            a_submission("s1", 3),
            a_submission("s2", 1),
        ]
        attempts = [_attempt(2), _attempt(1), _attempt(1, "s2-sub1")]
        calls = [_model_call(1), _model_call(0), _model_call(0, "t2")]
        tasks = [a_task("t1", 0, 0), a_task("t1", 0, 1), a_task("t1", 1, 0), a_task("t2", 0, 0)]
        tasks[-1] = a_task("t2", 0, 0, session_id="s2")

        def body(tx: Tx) -> None:
            for record in [*sessions, *subs, *attempts, *calls, *tasks]:
                _store_one(tx, record)

        write(store, body)
        cases: list[tuple[Kind[Any], str, Key, list[Any]]] = [
            (SESSION, "all", (), [sessions[1], sessions[0], sessions[2]]),
            (SESSION, "active", (), [sessions[1], sessions[0]]),
            (SUBMISSION, "request", ("s1-req3",), [subs[2]]),
            (SUBMISSION, "request", ("nobody",), []),
            (SUBMISSION, "session", ("s1",), [subs[1], subs[0], subs[2]]),
            (SUBMISSION, "unsettled", ("s1",), [subs[0], subs[2]]),
            (ATTEMPT, "submission", ("s1-sub1",), [attempts[1], attempts[0]]),
            (MODEL_CALL, "turn", ("t1",), [calls[1], calls[0]]),
            (TOOL_TASK, "turn", ("t1",), tasks[:3]),
            (TOOL_TASK, "turn_round", ("t1", 0), tasks[:2]),
            (TOOL_TASK, "turn_round", ("t1", 1), tasks[2:3]),
            (TOOL_TASK, "session", ("s1",), tasks[:3]),
            (TOOL_TASK, "session", ("s2",), tasks[3:]),
        ]
        for kind, index, value, expected in cases:
            got = look(store, _ranged(kind, index, value))
            assert _keys(got) == _keys(expected), (kind, index, value)
            assert got == expected, (kind, index, value)

    @pytest.mark.parametrize(
        ("kind", "make"),
        [(MESSAGE, _message), (EVENT, _event)],
        ids=["message", "event"],
    )
    def test_range_after_a_cursor_with_a_limit(
        self, store: Store, kind: Kind[Any], make: Callable[[int], Any]
    ) -> None:
        records = [make(seq) for seq in range(1, 7)]
        write(store, _each(records))

        def seqs(after: int, limit: int | None) -> list[int]:
            found = look(
                store, lambda r: r.range(kind, "session", ("s1",), after=after, limit=limit)
            )
            return [r.seq for r in found]

        assert seqs(0, None) == [1, 2, 3, 4, 5, 6]
        assert seqs(2, None) == [3, 4, 5, 6]
        assert seqs(2, 2) == [3, 4]
        assert seqs(0, 1) == [1]
        assert seqs(6, None) == []
        assert look(store, lambda r: list(r.range(kind, "session", ("s2",)))) == []

    def test_range_after_on_another_ordered_index(self, store: Store) -> None:
        subs = [a_submission("s1", seq) for seq in (1, 2, 3)]
        write(store, _each(subs))
        got = look(store, lambda r: r.range(SUBMISSION, "session", ("s1",), after=1, limit=1))
        assert list(got) == [subs[1]]

    def test_range_and_get_see_the_transactions_own_writes(self, store: Store) -> None:
        write(store, _each([an_event(seq=1), an_event(seq=2)]))

        def body(tx: Tx) -> tuple[list[int], Any, list[int]]:
            tx.append(an_event(seq=3))
            tx.put(a_task("t1", 0, 1), expected_version=None)
            events = [e.seq for e in tx.range(EVENT, "session", ("s1",), after=1)]
            tasks = [t.index for t in tx.range(TOOL_TASK, "turn_round", ("t1", 0))]
            return events, tx.get(EVENT, ("s1", 3)), tasks

        events, third, tasks = write(store, body)
        assert events == [2, 3]
        assert third == an_event(seq=3)
        assert tasks == [1]

    def test_an_unknown_index_is_refused(self, store: Store) -> None:
        with pytest.raises(ValueError, match="no index"):
            look(store, lambda r: r.range(SESSION, "by_agent", ("agent",)))
        assert TURN.indexes == {}  # a turn is read by its id only


def _ranged(kind: Kind[Any], index: str, value: Key) -> Callable[[ReadView], list[Any]]:
    return lambda view: list(view.range(kind, index, value))


def _elsewhere(record: Any) -> Any:
    """``record`` under a key nothing was written to."""
    kind = next(k for k in KINDS if isinstance(record, k.cls))
    first = kind.key[0]
    return dataclasses.replace(record, **{first: f"{getattr(record, first)}-elsewhere"})
