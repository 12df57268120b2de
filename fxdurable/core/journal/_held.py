"""Transitions that write without reading: the records a lease holder holds, as a transaction
sees them.

A lease holder's own commits hand back what they wrote (the session row in
:class:`~fxdurable.core.journal.Written`, the turn, the tasks). Its next transition can then
write from those records instead of reading them again (:class:`Held`): the transaction's
reads of them are answered from memory (:class:`Overlay`), and its writes carry the held
versions as their ``expected_version``, so the store fences them in the statement itself
(SQLite's ``UPDATE … WHERE version = ?``, Redis's and DynamoDB's commit conditions on a blind
write). The session's version is the fence: every other writer of a session (claim,
takeover, steer, abort, answer, heartbeat, settle, admission) changes its row and so its
version, so a holder whose session version still matches knows nothing else has been written.
When it does not match, the write conflicts, nothing is written, and the template runs the
transition again the ordinary way, reading everything (``_base.Transitions._transition``).

The overlay also answers a transaction's reads of its own writes from memory (a model
response's new task, read again by the merged intent of its first call), held or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from fxdurable.core.kinds import Key, Kind
from fxdurable.core.records import (
    AttemptRecord,
    EventRecord,
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
    TurnRecord,
)
from fxdurable.core.store import Tx

R = TypeVar("R")

__all__ = ["Held", "Overlay", "StaleHeld"]


@dataclass(frozen=True, slots=True)
class Held:
    """The records a lease holder last wrote (or read) of its turn, by their versions."""

    session: SessionRecord
    submission: SubmissionRecord | None = None
    turn: TurnRecord | None = None
    tasks: Mapping[str, ToolTaskRecord] = field(default_factory=dict)


class StaleHeld(Exception):
    """A store re-ran a held transition's body (an optimistic store's conflict): what is held
    is stale, so the ordinary transition runs instead. Never leaves the journal."""


class Overlay:
    """A :class:`Tx` whose reads of the held records and of its own writes come from memory."""

    def __init__(self, tx: Tx, held: Held | None) -> None:
        self._tx = tx
        self._sessions: dict[str, SessionRecord] = {}
        self._submissions: dict[str, SubmissionRecord] = {}
        self._turns: dict[str, TurnRecord] = {}
        self._tasks: dict[str, ToolTaskRecord] = {}
        if held is not None:
            self._sessions[held.session.id] = held.session
            if held.submission is not None:
                self._submissions[held.submission.id] = held.submission
            if held.turn is not None:
                self._turns[held.turn.id] = held.turn
            self._tasks.update(held.tasks)

    # -- reads the overlay may answer -----------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord | None:
        found = self._sessions.get(session_id)
        return found if found is not None else self._tx.get_session(session_id)

    def get_submission(self, submission_id: str) -> SubmissionRecord | None:
        found = self._submissions.get(submission_id)
        return found if found is not None else self._tx.get_submission(submission_id)

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        found = self._turns.get(turn_id)
        return found if found is not None else self._tx.get_turn(turn_id)

    def get_tool_task(self, task_id: str) -> ToolTaskRecord | None:
        found = self._tasks.get(task_id)
        return found if found is not None else self._tx.get_tool_task(task_id)

    # -- the store's primitives, passed through: the journal writes and reads by name; a
    # primitive call (a tool's read view, a derived helper) sees the store as it is
    def get(self, kind: Kind[R], key: Key) -> R | None:
        return self._tx.get(kind, key)

    def range(
        self,
        kind: Kind[R],
        index: str,
        value: Key = (),
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> Sequence[R]:
        return self._tx.range(kind, index, value, after=after, limit=limit)

    def put(self, record: object, *, expected_version: int | None) -> None:
        self._tx.put(record, expected_version=expected_version)

    def append(self, record: object) -> None:
        self._tx.append(record)

    def delete(self, kind: Kind[R], key: Key) -> None:
        self._tx.delete(kind, key)

    # -- reads that go to the store ---------------------------------------------------------------

    def list_sessions(self) -> Sequence[SessionRecord]:
        return self._tx.list_sessions()

    def active_sessions(self) -> Sequence[SessionRecord]:
        return self._tx.active_sessions()

    def get_submission_by_request(self, request_id: str) -> SubmissionRecord | None:
        return self._tx.get_submission_by_request(request_id)

    def submissions(self, session_id: str) -> Sequence[SubmissionRecord]:
        return self._tx.submissions(session_id)

    def unsettled_submissions(self, session_id: str) -> Sequence[SubmissionRecord]:
        return self._tx.unsettled_submissions(session_id)

    def attempts(self, submission_id: str) -> Sequence[AttemptRecord]:
        return self._tx.attempts(submission_id)

    def get_model_call(self, turn_id: str, round_: int) -> ModelCallRecord | None:
        return self._tx.get_model_call(turn_id, round_)

    def model_calls(self, turn_id: str) -> Sequence[ModelCallRecord]:
        return self._tx.model_calls(turn_id)

    def tool_tasks(self, turn_id: str, round_: int | None = None) -> Sequence[ToolTaskRecord]:
        return self._tx.tool_tasks(turn_id, round_)

    def session_tool_tasks(self, session_id: str) -> Sequence[ToolTaskRecord]:
        return self._tx.session_tool_tasks(session_id)

    def messages(self, session_id: str, after: int = 0) -> Sequence[MessageRecord]:
        return self._tx.messages(session_id, after)

    def events(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> Sequence[EventRecord]:
        return self._tx.events(session_id, after, limit)

    # -- writes: to the store, and remembered -----------------------------------------------------

    def put_session(self, record: SessionRecord, *, expected_version: int | None) -> None:
        self._tx.put_session(record, expected_version=expected_version)
        self._sessions[record.id] = record

    def put_submission(self, record: SubmissionRecord, *, expected_version: int | None) -> None:
        self._tx.put_submission(record, expected_version=expected_version)
        self._submissions[record.id] = record

    def put_attempt(self, record: AttemptRecord, *, expected_version: int | None) -> None:
        self._tx.put_attempt(record, expected_version=expected_version)

    def put_turn(self, record: TurnRecord, *, expected_version: int | None) -> None:
        self._tx.put_turn(record, expected_version=expected_version)
        self._turns[record.id] = record

    def put_tool_task(self, record: ToolTaskRecord, *, expected_version: int | None) -> None:
        self._tx.put_tool_task(record, expected_version=expected_version)
        self._tasks[record.id] = record

    def insert_model_call(self, record: ModelCallRecord) -> None:
        self._tx.insert_model_call(record)

    def append_message(self, record: MessageRecord) -> None:
        self._tx.append_message(record)

    def append_event(self, record: EventRecord) -> None:
        self._tx.append_event(record)
