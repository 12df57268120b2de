"""Queries and exact round trips: ordering, cursors, every field of every record.

Part of :class:`~fxdurable.testing.store_contract.StoreContract`: each test takes the ``store``
fixture the subclass provides."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fxdurable.core.records import (
    AttemptRecord,
    ErrorInfo,
    EventRecord,
    Lease,
    MessageRecord,
    ModelCallRecord,
    ToolCallRequest,
    TurnRecord,
    Usage,
)
from fxdurable.core.states import (
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
)
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.testing.store_contract.builders import (
    a_session,
    a_submission,
    a_task,
    an_event,
    look,
    write,
)

if TYPE_CHECKING:
    pass

__all__ = ["ReadContract"]


def _message(sid: str, seq: int) -> MessageRecord:
    return MessageRecord(session_id=sid, seq=seq, turn_id="t1", role="user", text=f"m{seq}")


# -- exact round trips -----------------------------------------------------------------------
CALLS = (
    ToolCallRequest(name="read_file", arguments='{\n  "path": "é.txt"\n}', provider_id="c1"),
    ToolCallRequest(name="shell", arguments="{}", provider_id=None),
)


def _events_page(view: ReadView, *, after: int) -> Sequence[EventRecord]:
    return view.events("s1", after=after, limit=2)


class ReadContract:
    """See the module."""

    # -- queries ---------------------------------------------------------------------------------
    def test_events_paginate_by_cursor(self, store: Store) -> None:
        def body(tx: Tx) -> None:
            for seq in (3, 1, 5, 2, 4, 6, 7):  # insertion order must not matter
                tx.append_event(an_event("s1", seq))
            tx.append_event(an_event("s2", 1))

        write(store, body)

        assert [e.seq for e in look(store, lambda r: r.events("s1"))] == [1, 2, 3, 4, 5, 6, 7]
        assert [e.seq for e in look(store, lambda r: r.events("s1", after=3))] == [4, 5, 6, 7]
        assert [e.seq for e in look(store, lambda r: r.events("s1", after=0, limit=3))] == [1, 2, 3]
        assert [e.seq for e in look(store, lambda r: r.events("s1", after=5, limit=3))] == [6, 7]
        assert look(store, lambda r: r.events("s1", after=7)) == []
        assert look(store, lambda r: r.events("s1", limit=0)) == []

        cursor, pages = 0, []
        while page := look(store, functools.partial(_events_page, after=cursor)):
            pages.append([e.seq for e in page])
            cursor = page[-1].seq
        assert pages == [[1, 2], [3, 4], [5, 6], [7]]

    def test_messages_read_past_a_cursor(self, store: Store) -> None:
        def body(tx: Tx) -> None:
            for seq in (3, 1, 5, 2, 4):  # insertion order must not matter
                tx.append_message(_message("s1", seq))
            tx.append_message(_message("s2", 9))

        write(store, body)

        assert [m.seq for m in look(store, lambda r: r.messages("s1"))] == [1, 2, 3, 4, 5]
        assert [m.seq for m in look(store, lambda r: r.messages("s1", after=3))] == [4, 5]
        assert look(store, lambda r: r.messages("s1", after=5)) == []

        def own_writes(tx: Tx) -> list[int]:
            tx.append_message(_message("s1", 6))
            return [m.seq for m in tx.messages("s1", after=4)]

        assert write(store, own_writes) == [5, 6]

    def test_unsettled_submissions_in_admission_order(self, store: Store) -> None:
        statuses = {
            1: SubmissionStatus.COMPLETED,
            2: SubmissionStatus.RUNNING,
            3: SubmissionStatus.ABORTED,
            4: SubmissionStatus.QUEUED,
            5: SubmissionStatus.FAILED,
            6: SubmissionStatus.QUEUED,
        }

        def body(tx: Tx) -> None:
            for seq in (6, 4, 1, 5, 3, 2):  # ids sort differently from seq on purpose
                tx.put_submission(
                    a_submission(seq=seq, id=f"z{10 - seq}", status=statuses[seq]),
                    expected_version=None,
                )
            tx.put_submission(a_submission("s2", 1), expected_version=None)

        write(store, body)

        unsettled = look(store, lambda r: r.unsettled_submissions("s1"))
        assert [s.seq for s in unsettled] == [2, 4, 6]
        assert [s.seq for s in look(store, lambda r: r.submissions("s1"))] == [1, 2, 3, 4, 5, 6]

    def test_unsettled_follows_status_updates(self, store: Store) -> None:
        sub = a_submission()
        write(store, lambda tx: tx.put_submission(sub, expected_version=None))
        done = a_submission(status=SubmissionStatus.COMPLETED, version=2)
        write(store, lambda tx: tx.put_submission(done, expected_version=1))
        assert look(store, lambda r: r.unsettled_submissions("s1")) == []
        assert look(store, lambda r: r.get_submission_by_request("s1-req1")) == done

    def test_active_sessions(self, store: Store) -> None:
        def body(tx: Tx) -> None:
            tx.put_session(a_session("b"), expected_version=None)
            tx.put_session(a_session("a", status=SessionStatus.IDLE), expected_version=None)
            tx.put_session(a_session("c"), expected_version=None)

        write(store, body)
        assert sorted(s.id for s in look(store, lambda r: r.active_sessions())) == ["b", "c"]
        assert sorted(s.id for s in look(store, lambda r: r.list_sessions())) == ["a", "b", "c"]

        write(
            store,
            lambda tx: tx.put_session(
                a_session("b", status=SessionStatus.IDLE, version=2), expected_version=1
            ),
        )
        assert [s.id for s in look(store, lambda r: r.active_sessions())] == ["c"]

    def test_tool_tasks_ordered_by_position(self, store: Store) -> None:
        def body(tx: Tx) -> None:
            for round_, index in ((1, 0), (0, 2), (0, 0), (1, 1), (0, 1)):
                tx.put_tool_task(a_task("t1", round_, index), expected_version=None)
            tx.put_tool_task(a_task("t2", 0, 0), expected_version=None)

        write(store, body)
        got = look(store, lambda r: r.tool_tasks("t1"))
        assert [(t.round, t.index) for t in got] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
        assert len(look(store, lambda r: r.session_tool_tasks("s1"))) == 6

    def test_model_calls_and_attempts_ordered(self, store: Store) -> None:
        def body(tx: Tx) -> None:
            for round_ in (2, 0, 1):
                tx.insert_model_call(
                    ModelCallRecord(
                        turn_id="t1",
                        round=round_,
                        status=ModelCallStatus.COMPLETED,
                        text=str(round_),
                        created_at=1.0,
                    )
                )
            for number in (3, 1, 2):
                tx.put_attempt(
                    AttemptRecord(
                        submission_id="sub",
                        number=number,
                        status=AttemptStatus.RUNNING,
                        worker="w",
                        started_at=1.0,
                    ),
                    expected_version=None,
                )

        write(store, body)
        assert [c.round for c in look(store, lambda r: r.model_calls("t1"))] == [0, 1, 2]
        assert look(store, lambda r: r.get_model_call("t1", 1)).text == "1"
        assert look(store, lambda r: r.get_model_call("t1", 9)) is None
        assert [a.number for a in look(store, lambda r: r.attempts("sub"))] == [1, 2, 3]

    def test_missing_records_read_as_none_or_empty(self, store: Store) -> None:
        assert look(store, lambda r: r.get_session("x")) is None
        assert look(store, lambda r: r.get_submission("x")) is None
        assert look(store, lambda r: r.get_submission_by_request("x")) is None
        assert look(store, lambda r: r.get_turn("x")) is None
        assert look(store, lambda r: r.get_tool_task("x")) is None
        assert look(store, lambda r: list(r.messages("x"))) == []
        assert look(store, lambda r: list(r.submissions("x"))) == []

    def test_records_round_trip_exactly(self, store: Store) -> None:
        session = a_session(
            lease=Lease(owner="lease-9", token=4, expires_at=99.5, host="h", pid=7),
            owner="alice",
            steering=("make it blue ✓", "and fast"),
            next_event_seq=3,
            next_message_seq=2,
            next_submission_seq=5,
        )
        sub = a_submission(
            status=SubmissionStatus.FAILED,
            attempts=2,
            interruptions=1,
            abort_requested=True,
            cursor=17,
            error=ErrorInfo(code="c", message="m ✓", unknown_calls=("a", "b")),
            started_at=2.0,
            settled_at=3.5,
        )
        attempt = AttemptRecord(
            submission_id=sub.id,
            number=1,
            status=AttemptStatus.YIELDED,
            worker="w",
            started_at=1.0,
            ended_at=2.0,
            reason="deadline",
        )
        turn = TurnRecord(
            id="t1",
            session_id="s1",
            submission_id=sub.id,
            status=TurnStatus.FAILED,
            rounds=2,
            final_text=None,
        )
        call = ModelCallRecord(
            turn_id="t1",
            round=0,
            status=ModelCallStatus.COMPLETED,
            text="two calls",
            tool_calls=CALLS,
            usage=Usage(input_tokens=11, output_tokens=22),
            stop_reason="tool_calls",
            stop_inferred=True,
            truncated=False,
            created_at=4.0,
        )
        task = a_task(
            provider_id="c1", status=ToolTaskStatus.OUTCOME_UNKNOWN, runs=3, result="unknown"
        )
        message = MessageRecord(
            session_id="s1",
            seq=1,
            turn_id="t1",
            role="assistant",
            text="hi",
            round=0,
            tool_calls=CALLS,
        )
        event = EventRecord(
            session_id="s1",
            seq=1,
            type="x",
            turn_id="t1",
            data={"list": [1, "two", None], "obj": {"k": False}, "f": 1.5},
            at=5.0,
        )

        def body(tx: Tx) -> None:
            tx.put_session(session, expected_version=None)
            tx.put_submission(sub, expected_version=None)
            tx.put_attempt(attempt, expected_version=None)
            tx.put_turn(turn, expected_version=None)
            tx.insert_model_call(call)
            tx.put_tool_task(task, expected_version=None)
            tx.append_message(message)
            tx.append_event(event)

        write(store, body)

        assert look(store, lambda r: r.get_session("s1")) == session
        assert look(store, lambda r: r.get_submission(sub.id)) == sub
        assert look(store, lambda r: list(r.attempts(sub.id))) == [attempt]
        assert look(store, lambda r: r.get_turn("t1")) == turn
        assert look(store, lambda r: r.get_model_call("t1", 0)) == call
        assert look(store, lambda r: r.get_tool_task(task.id)) == task
        assert look(store, lambda r: list(r.messages("s1"))) == [message]
        assert look(store, lambda r: list(r.events("s1"))) == [event]
        back = look(store, lambda r: r.get_model_call("t1", 0))
        assert isinstance(back.tool_calls, tuple) and isinstance(
            back.tool_calls[0], ToolCallRequest
        )
        assert isinstance(back.usage, Usage)
        assert isinstance(look(store, lambda r: r.get_session("s1")).lease, Lease)
