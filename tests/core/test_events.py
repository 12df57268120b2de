"""The event vocabulary: one typed payload per event type, the stored shapes unchanged, and a
journal that refuses to emit an event with another type's payload."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from fxdurable.core.events import (
    PAYLOADS,
    WHEN,
    WIRE_VERSION,
    EventType,
    ModelCompleted,
    ModelText,
    SubmissionSettled,
    payload_data,
    payload_of,
)
from fxdurable.core.journal import Journal, WorkerIdentity, _SessionScope
from fxdurable.core.records import ErrorInfo, EventRecord, ToolCallRequest, Usage
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.store import Tx
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import FakeClock
from tests.core.test_journal import CountingIds

# The wire format of WIRE_VERSION 1.x: these strings are stored with every event and sent as
# the ``type`` of HTTP lines. Changing one here is a breaking change of the wire format
# (bump WIRE_VERSION's major part, migrate stored events); adding one bumps the minor part.
WIRE_1 = {
    "session.created",
    "submission.admitted",
    "submission.completed",
    "submission.failed",
    "submission.aborted",
    "submission.interrupted",
    "abort.requested",
    "steer.recorded",
    "steer.delivered",
    "steer.dropped",
    "steer.requeued",
    "turn.started",
    "attempt.started",
    "attempt.interrupted",
    "attempt.yielded",
    "model.partial",
    "model.completed",
    "model.error",
    "model.interrupted",
    "context.compacted",
    "output.rejected",
    "tool.started",
    "tool.completed",
    "tool.failed",
    "tool.cancelled",
    "tool.outcome_unknown",
    "tool.refused",
    "tool.step",  # 1.1
    "input.requested",  # 1.3
    "input.answered",  # 1.3
    "state.changed",  # 1.5
    "model.fallback",  # 1.6
    "tool.retrying",  # 1.7
    "webhook.delivered",  # 1.8
    "webhook.abandoned",  # 1.8
}


def test_the_event_types_are_the_wire_strings_of_their_version() -> None:
    assert WIRE_VERSION.split(".")[0] == "1"
    assert {t.value for t in EventType} == WIRE_1


@pytest.mark.parametrize("event_type", list(EventType))
def test_every_event_type_has_a_frozen_payload_and_a_description(event_type: EventType) -> None:
    payload = PAYLOADS[event_type]
    assert dataclasses.is_dataclass(payload)
    assert payload.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert WHEN[event_type]


def test_every_terminal_tool_status_has_its_event() -> None:
    from fxdurable.core.events import tool_settled_event
    from fxdurable.core.states import is_terminal

    for status in ToolTaskStatus:
        if is_terminal(status):
            assert tool_settled_event(status).value == f"tool.{status.value}"


def test_a_payload_of_another_event_type_is_refused() -> None:
    text = ModelText(round=0, text="hi")
    with pytest.raises(TypeError, match="ModelCompleted payload, not ModelText"):
        payload_data(EventType.MODEL_COMPLETED, text)
    assert payload_data(EventType.MODEL_PARTIAL, text) == {"round": 0, "text": "hi"}


# -- through the journal, on a real store ----------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(f"sqlite:///{tmp_path}/e.db")
    yield s
    s.close()


@pytest.fixture
def journal(store: SqliteStore) -> Journal:
    return Journal(store, FakeClock(1_000.0), CountingIds())


def _events(journal: Journal) -> list[EventRecord]:
    return list(journal.read(lambda view: view.events("s1")))


def test_a_journal_emitting_a_payload_of_the_wrong_type_writes_nothing(
    journal: Journal, store: SqliteStore
) -> None:
    journal.admit("s1", agent="a", prompt="hello")
    before = _events(journal)

    def body(tx: Tx) -> None:
        session = tx.get_session("s1")
        assert session is not None
        scope = _SessionScope(tx, lambda: 1_000.0)
        scope.open(session)
        scope.emit(EventType.MODEL_COMPLETED, SubmissionSettled(submission="sub-1"))
        scope.commit()

    with pytest.raises(TypeError, match="ModelCompleted payload"):
        store.transact(body)
    assert _events(journal) == before


def test_events_are_stored_in_the_shapes_written_before_they_were_typed(
    journal: Journal,
) -> None:
    """The stored ``data`` of each event is what the untyped journal wrote: tuples as lists,
    an absent ``text``/``error`` of a settlement omitted, other ``None`` fields kept."""
    admission = journal.admit("s1", agent="a", prompt="hello", request_id="r1")
    fence = journal.claim("s1", WorkerIdentity(host="h", pid=1), ttl_s=30)
    assert fence is not None
    sub = admission.submission.id
    journal.begin_attempt(fence, sub, worker="w1")
    call = ToolCallRequest(name="deploy", arguments="{}", provider_id="c0")
    usage = Usage(input_tokens=7, output_tokens=3)
    (task,) = journal.record_model_call(
        fence, sub, round_=0, text="", tool_calls=[call], policies=["unsafe"], usage=usage
    ).tasks
    journal.start_tool(fence, task.id)
    journal.finish_tool(fence, task.id, ToolTaskStatus.OUTCOME_UNKNOWN, "unknown")
    error = ErrorInfo(code="attempts_exhausted", message="gave up", unknown_calls=(task.id,))
    journal.settle(fence, sub, "failed", error=error)

    stored = _events(journal)
    for event in stored:  # each reads back as its typed payload, and writes back the same
        payload = payload_of(event)
        assert payload is not None
        assert payload_data(EventType(event.type), payload) == event.data
    data = {e.type: dict(e.data) for e in stored}
    ref = {"task": task.id, "tool": "deploy", "round": 0, "index": 0}
    assert data == {
        "session.created": {"agent": "a"},
        "submission.admitted": {"submission": sub, "request_id": "r1"},
        "turn.started": {"prompt": "hello"},
        "attempt.started": {"number": 1, "worker": "w1", "agent_version": None},  # 1.7
        "model.completed": {
            "round": 0,
            "text": "",
            "tools": ["deploy"],
            "input_tokens": 7,
            "output_tokens": 3,
            "cost_usd": None,
            "cache_read_tokens": 0,  # 1.6
            "cache_creation_tokens": 0,
            "reasoning_tokens": 0,
            "stop_reason": None,
            "stop_inferred": False,
            "truncated": False,
        },
        "tool.started": {
            **ref,
            "policy": "unsafe",
            "run": 1,
            "execution_id": task.execution_id,
            "reason": None,
        },
        "tool.outcome_unknown": {**ref, "result": "unknown"},
        "submission.failed": {
            "submission": sub,
            "error": {
                "code": "attempts_exhausted",
                "message": "gave up",
                "unknown_calls": [task.id],
            },
        },
    }


def _stored(type_: str, **data: object) -> EventRecord:
    return EventRecord(session_id="s", seq=1, type=type_, turn_id=None, data=data, at=1.0)


def test_an_event_stored_before_a_field_was_added_reads_with_its_default() -> None:
    old = _stored(
        "model.completed",
        round=0,
        text="hi",
        tools=["deploy"],
        input_tokens=1,
        output_tokens=2,
        cost_usd=None,
    )
    assert payload_of(old) == ModelCompleted(
        round=0, text="hi", tools=("deploy",), input_tokens=1, output_tokens=2, cost_usd=None
    )


def test_an_event_of_a_newer_writer_has_no_payload_here() -> None:
    assert payload_of(_stored("model.dreamed", text="?")) is None
