"""Conditional writes and transactions: insert-if-absent, version checks, rollback.

Part of :class:`~fxdurable.testing.store_contract.StoreContract`: each test takes the ``store``
fixture the subclass provides."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from fxdurable.core.records import (
    AttemptRecord,
    MessageRecord,
    ModelCallRecord,
    TurnRecord,
)
from fxdurable.core.states import (
    AttemptStatus,
    ModelCallStatus,
    SessionStatus,
    TurnStatus,
)
from fxdurable.core.store import Store, Tx
from fxdurable.errors import ConflictError
from fxdurable.testing.store_contract.builders import (
    Boom,
    a_session,
    a_submission,
    a_task,
    an_event,
    look,
    write,
)

if TYPE_CHECKING:
    pass

__all__ = ["WriteContract"]


class WriteContract:
    """See the module."""

    # -- conditional writes ----------------------------------------------------------------------
    def test_insert_if_absent_conflicts(self, store: Store) -> None:
        write(store, lambda tx: tx.put_session(a_session(), expected_version=None))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_session(a_session(agent="other"), expected_version=None))
        assert look(store, lambda r: r.get_session("s1")) == a_session()

    @pytest.mark.parametrize(
        "put",
        [
            lambda tx: tx.put_submission(a_submission(), expected_version=None),
            lambda tx: tx.put_attempt(
                AttemptRecord(
                    submission_id="s1-sub1",
                    number=1,
                    status=AttemptStatus.RUNNING,
                    worker="w",
                    started_at=1.0,
                ),
                expected_version=None,
            ),
            lambda tx: tx.put_turn(
                TurnRecord(
                    id="t1", session_id="s1", submission_id="s1-sub1", status=TurnStatus.RUNNING
                ),
                expected_version=None,
            ),
            lambda tx: tx.put_tool_task(a_task(), expected_version=None),
            lambda tx: tx.insert_model_call(
                ModelCallRecord(
                    turn_id="t1", round=0, status=ModelCallStatus.COMPLETED, text="", created_at=1.0
                )
            ),
            lambda tx: tx.append_message(
                MessageRecord(session_id="s1", seq=1, turn_id="t1", role="user", text="x")
            ),
            lambda tx: tx.append_event(an_event()),
        ],
        ids=["submission", "attempt", "turn", "tool_task", "model_call", "message", "event"],
    )
    def test_every_insert_is_if_absent(self, store: Store, put: Callable[[Tx], None]) -> None:
        write(store, put)
        with pytest.raises(ConflictError):
            write(store, put)

    def test_duplicate_request_id_conflicts(self, store: Store) -> None:
        """Idempotency lives in the schema: one submission per request id."""
        write(store, lambda tx: tx.put_submission(a_submission(), expected_version=None))
        dup = a_submission(seq=2, request_id="s1-req1")
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_submission(dup, expected_version=None))

    def test_duplicate_submission_position_conflicts(self, store: Store) -> None:
        write(store, lambda tx: tx.put_submission(a_submission(), expected_version=None))
        dup = a_submission(id="other", request_id="other")
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_submission(dup, expected_version=None))

    def test_duplicate_tool_task_position_conflicts(self, store: Store) -> None:
        write(store, lambda tx: tx.put_tool_task(a_task(), expected_version=None))
        dup = a_task(id="another-id")
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_tool_task(dup, expected_version=None))

    def test_duplicate_event_seq_conflicts(self, store: Store) -> None:
        write(store, lambda tx: tx.append_event(an_event("s1", 1)))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.append_event(an_event("s1", 1)))
        write(store, lambda tx: tx.append_event(an_event("s2", 1)))  # another session's seq 1
        assert look(store, lambda r: r.events("s1")) == [an_event("s1", 1)]

    def test_put_with_the_current_version_succeeds(self, store: Store) -> None:
        write(store, lambda tx: tx.put_session(a_session(), expected_version=None))
        v2 = a_session(status=SessionStatus.IDLE, version=2)
        write(store, lambda tx: tx.put_session(v2, expected_version=1))
        assert look(store, lambda r: r.get_session("s1")) == v2

    @pytest.mark.parametrize("expected", [0, 2, 5])
    def test_put_with_a_stale_version_conflicts(self, store: Store, expected: int) -> None:
        write(store, lambda tx: tx.put_session(a_session(), expected_version=None))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_session(a_session(version=9), expected_version=expected))
        assert look(store, lambda r: r.get_session("s1")) == a_session()

    def test_update_of_a_missing_record_conflicts(self, store: Store) -> None:
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_session(a_session(version=2), expected_version=1))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_tool_task(a_task(version=2), expected_version=1))
        assert look(store, lambda r: r.get_session("s1")) is None

    def test_version_checks_apply_to_every_versioned_record(self, store: Store) -> None:
        sub = a_submission()
        task = a_task()
        write(store, lambda tx: tx.put_submission(sub, expected_version=None))
        write(store, lambda tx: tx.put_tool_task(task, expected_version=None))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_submission(sub, expected_version=3))
        with pytest.raises(ConflictError):
            write(store, lambda tx: tx.put_tool_task(task, expected_version=3))

    # -- transactions ----------------------------------------------------------------------------
    def test_reads_see_the_transactions_own_writes(self, store: Store) -> None:
        def body(tx: Tx) -> tuple[Any, ...]:
            tx.put_session(a_session(), expected_version=None)
            tx.put_submission(a_submission(), expected_version=None)
            tx.append_event(an_event())
            return (
                tx.get_session("s1"),
                tx.get_submission("s1-sub1"),
                tx.get_submission_by_request("s1-req1"),
                list(tx.unsettled_submissions("s1")),
                list(tx.events("s1")),
                [s.id for s in tx.active_sessions()],
            )

        session, sub, by_request, unsettled, events, active = write(store, body)
        assert session == a_session()
        assert sub == by_request == a_submission()
        assert unsettled == [a_submission()]
        assert events == [an_event()]
        assert active == ["s1"]

    def test_a_failing_body_rolls_everything_back(self, store: Store) -> None:
        write(store, lambda tx: tx.put_session(a_session(), expected_version=None))

        def body(tx: Tx) -> None:
            tx.put_session(a_session(status=SessionStatus.IDLE, version=2), expected_version=1)
            tx.put_submission(a_submission(), expected_version=None)
            tx.append_event(an_event())
            tx.put_tool_task(a_task(), expected_version=None)
            raise Boom("after the writes")

        with pytest.raises(Boom):
            write(store, body)

        assert look(store, lambda r: r.get_session("s1")) == a_session()
        assert look(store, lambda r: r.submissions("s1")) == []
        assert look(store, lambda r: r.events("s1")) == []
        assert look(store, lambda r: r.get_tool_task(a_task().id)) is None
        # The store is usable afterwards.
        write(store, lambda tx: tx.append_event(an_event()))

    def test_a_conflict_rolls_back_the_earlier_writes_of_the_body(self, store: Store) -> None:
        write(store, lambda tx: tx.append_event(an_event("s1", 1)))

        def body(tx: Tx) -> None:
            tx.put_session(a_session(), expected_version=None)
            tx.append_event(an_event("s1", 1))  # conflicts

        with pytest.raises(ConflictError):
            write(store, body)
        assert look(store, lambda r: r.get_session("s1")) is None

    def test_transact_returns_the_body_result(self, store: Store) -> None:
        assert write(store, lambda tx: 42) == 42
        assert look(store, lambda r: "read") == "read"

    def test_base_exceptions_roll_back_too(self, store: Store) -> None:
        """A Suspend/KeyboardInterrupt inside a body must not leave a half-written record."""

        def body(tx: Tx) -> None:
            tx.put_session(a_session(), expected_version=None)
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            write(store, body)
        assert look(store, lambda r: r.get_session("s1")) is None
