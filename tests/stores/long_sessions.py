"""Long sessions for the fork tests, built by direct journal writes (no model, no runtime).

``built_sqlite(path, events)`` builds a resting session of at least ``events`` events in a
SQLite file with the bench's session driver (one turn of many one-tool rounds, each round a
model step, its tool's start and its result), at ``synchronous=NORMAL``, once per size per
test process. ``load_into(store, source_url)`` writes every record of that file's sessions into
another store, in the store's own layout through its own transactions (records as the
journal wrote them, so the copy is that session), in one transaction: on DynamoDB one
``TransactWriteItems`` per transition of the journal's would cost minutes on moto (each
deep-copies the table), and one transaction of new partitions is staged (_ddb_stage).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.sqlite_steps import MODEL_TEXT, SessionDriver, open_journal
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
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.stores.sqlite import SqliteStore

__all__ = ["SESSION", "built_sqlite", "load_into"]

SESSION = "long"
_BUILT: dict[int, Path] = {}


def built_sqlite(directory: Path, events: int) -> Path:
    """A SQLite file holding session ``long`` of at least ``events`` events, at rest (a copy
    of this process's one build of that size)."""
    if events not in _BUILT:
        origin = directory / f"long-{events}.db"
        journal, store = open_journal(f"sqlite:///{origin}?synchronous=NORMAL")
        try:
            # One turn of one-tool rounds (3 events each), then settled: one submission, so
            # the DynamoDB load's last commit holds a handful of items besides what it stages.
            driver = SessionDriver(journal, SESSION)
            while driver.events() < events:
                driver.full_round()
            driver.model_step(tools=0)
            journal.settle(driver.fence, driver.submission_id, "completed", text=MODEL_TEXT)
            journal.release(driver.fence)
        finally:
            store.close()
        _BUILT[events] = origin
    copy = directory / f"copy-{len(list(directory.glob('copy-*')))}.db"
    shutil.copyfile(_BUILT[events], copy)
    return copy


class _Records:
    def __init__(self, view: ReadView, session_id: str) -> None:
        session = view.get_session(session_id)
        assert session is not None
        self.session: SessionRecord = session
        self.submissions: list[SubmissionRecord] = list(view.submissions(session_id))
        self.attempts: list[AttemptRecord] = [
            a for s in self.submissions for a in view.attempts(s.id)
        ]
        turns = {t.turn_id for t in view.session_tool_tasks(session_id)}
        turns |= {m.turn_id for m in view.messages(session_id)}
        self.turns: list[TurnRecord] = [t for i in sorted(turns) if (t := view.get_turn(i))]
        self.model_calls: list[ModelCallRecord] = [
            c for t in self.turns for c in view.model_calls(t.id)
        ]
        self.tasks: list[ToolTaskRecord] = list(view.session_tool_tasks(session_id))
        self.messages: list[MessageRecord] = list(view.messages(session_id))
        self.events: list[EventRecord] = list(view.events(session_id))


def load_into(store: Store, source: Path, session_id: str = SESSION) -> int:
    """Write session ``session_id`` of the SQLite file ``source`` into ``store``; its event
    count."""
    sqlite = SqliteStore(f"sqlite:///{source}")
    try:
        records = sqlite.read(lambda v: _Records(v, session_id))
    finally:
        sqlite.close()

    def rest(tx: Tx) -> None:
        assert tx.get_session(session_id) is None
        for turn in records.turns:
            assert not tx.model_calls(turn.id)  # read: its partition is new (DynamoDB stages)
        for call in records.model_calls:
            tx.insert_model_call(call)
        for attempt in records.attempts:
            tx.put_attempt(attempt, expected_version=None)
        for submission in records.submissions:
            tx.put_submission(submission, expected_version=None)
        for turn in records.turns:
            tx.put_turn(turn, expected_version=None)
        for task in records.tasks:
            tx.put_tool_task(task, expected_version=None)
        for message in records.messages:
            tx.append_message(message)
        for event in records.events:
            tx.append_event(event)
        tx.put_session(records.session, expected_version=None)

    store.transact(rest)
    return len(records.events)
