"""Records to JSON and back: exact round trips, canonical text, tolerant of other versions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fxdurable.core.recordcodec import decode, encode
from fxdurable.core.records import (
    AttemptRecord,
    ErrorInfo,
    EventRecord,
    Lease,
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolCallRequest,
    ToolTaskRecord,
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
from fxdurable.testing.store_contract.builders import a_session, a_submission, an_event

CALLS = (
    ToolCallRequest(name="read_file", arguments='{\n  "path": "a.txt"\n}', provider_id="c1"),
    ToolCallRequest(name="shell", arguments='{"cmd": "ls"}', provider_id=None),
)

# One of each record, every field away from its default where it has one.
SAMPLES: list[object] = [
    SessionRecord(
        id="s1",
        agent="agent",
        status=SessionStatus.ACTIVE,
        lease=Lease(owner="lease-1", token=3, expires_at=1030.5, host="h", pid=42),
        next_event_seq=9,
        next_message_seq=4,
        next_submission_seq=2,
        created_at=1000.25,
        version=7,
    ),
    a_session("s2", agent="a", status=SessionStatus.IDLE),  # every default
    SubmissionRecord(
        id="sub-1",
        session_id="s1",
        seq=1,
        request_id="r1",
        prompt='héllo ✓ "quoted"\nnewline',
        status=SubmissionStatus.FAILED,
        attempts=3,
        interruptions=2,
        abort_requested=True,
        result_text=None,
        error=ErrorInfo(code="budget", message="too many", unknown_calls=("t/r0/t1", "t/r1/t0")),
        created_at=1000.0,
        started_at=1001.0,
        settled_at=1002.0,
        version=5,
    ),
    a_submission("s1", 2, prompt=""),  # every default
    AttemptRecord(
        submission_id="sub-1",
        number=2,
        status=AttemptStatus.INTERRUPTED,
        worker="w@host:1",
        started_at=1.0,
        ended_at=2.0,
        reason="crash",
        version=2,
    ),
    TurnRecord(
        id="sub-1",
        session_id="s1",
        submission_id="sub-1",
        status=TurnStatus.COMPLETED,
        rounds=3,
        final_text="done",
        version=4,
    ),
    ModelCallRecord(
        turn_id="sub-1",
        round=1,
        status=ModelCallStatus.COMPLETED,
        text="calling tools",
        tool_calls=CALLS,
        usage=Usage(input_tokens=100, output_tokens=20),
        stop_reason="max_tokens",
        truncated=True,
        created_at=3.0,
    ),
    ModelCallRecord(
        turn_id="sub-1", round=0, status=ModelCallStatus.FAILED, text="", created_at=3.0
    ),
    ToolTaskRecord(
        id="sub-1/r1/t0",
        session_id="s1",
        turn_id="sub-1",
        round=1,
        index=0,
        tool="read_file",
        arguments='{"path": "a.txt"}',
        provider_id=None,
        policy="safe",
        status=ToolTaskStatus.OUTCOME_UNKNOWN,
        execution_id="xabc",
        runs=2,
        result="interrupted",
        updated_at=4.0,
        version=3,
    ),
    MessageRecord(
        session_id="s1",
        seq=2,
        turn_id="sub-1",
        role="assistant",
        text="calling tools",
        round=1,
        tool_calls=CALLS,
    ),
    MessageRecord(session_id="s1", seq=1, turn_id="sub-1", role="user", text="hi"),
    EventRecord(
        session_id="s1",
        seq=5,
        type="model.completed",
        turn_id="sub-1",
        data={"tools": ["read_file", "shell"], "nested": {"a": [1, 2.5, None, True]}, "n": 0},
        at=5.0,
    ),
    an_event("s1", 1, type="session.created", data={}, at=0.0),
]


def _id(record: object) -> str:
    return type(record).__name__


@pytest.mark.parametrize("record", SAMPLES, ids=_id)
def test_round_trip_is_exact(record: object) -> None:
    back = decode(type(record), encode(record))
    assert back == record
    assert type(back) is type(record)


@pytest.mark.parametrize("record", SAMPLES, ids=_id)
def test_decoded_fields_have_their_declared_types(record: object) -> None:
    """Equality alone would hide a status decoded as a plain str or a tuple as a list."""
    back = decode(type(record), encode(record))
    for f in dataclasses.fields(back):  # type: ignore[arg-type]
        original, decoded = getattr(record, f.name), getattr(back, f.name)
        assert type(decoded) is type(original), f.name
        if isinstance(original, tuple):
            assert [type(v) for v in decoded] == [type(v) for v in original], f.name


def test_nested_records_are_rebuilt() -> None:
    session = SAMPLES[0]
    assert isinstance(session, SessionRecord)
    back = decode(SessionRecord, encode(session))
    assert isinstance(back.lease, Lease)
    assert back.status is SessionStatus.ACTIVE

    sub = SAMPLES[2]
    assert isinstance(sub, SubmissionRecord)
    back_sub = decode(SubmissionRecord, encode(sub))
    assert isinstance(back_sub.error, ErrorInfo)
    assert back_sub.error.unknown_calls == ("t/r0/t1", "t/r1/t0")

    call = SAMPLES[6]
    assert isinstance(call, ModelCallRecord)
    back_call = decode(ModelCallRecord, encode(call))
    assert isinstance(back_call.tool_calls, tuple)
    assert all(isinstance(c, ToolCallRequest) for c in back_call.tool_calls)
    assert isinstance(back_call.usage, Usage)


def test_encoding_is_canonical() -> None:
    record = SAMPLES[0]
    text = encode(record)
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert encode(decode(SessionRecord, text)) == text
    # Equal values encode equally, whatever order a mapping was built in.
    a = an_event(data={"x": 1, "y": 2})
    b = an_event(data={"y": 2, "x": 1})
    assert encode(a) == encode(b)


def test_non_ascii_is_kept_readable() -> None:
    text = encode(SAMPLES[2])
    assert "héllo ✓" in text


def test_statuses_are_stored_as_their_values() -> None:
    raw = json.loads(encode(SAMPLES[0]))
    assert raw["status"] == "active"
    assert raw["lease"]["token"] == 3


def test_unknown_keys_from_a_newer_writer_are_ignored() -> None:
    raw = json.loads(encode(SAMPLES[0]))
    raw["added_in_v2"] = {"anything": 1}
    raw["lease"]["also_new"] = True
    assert decode(SessionRecord, json.dumps(raw)) == SAMPLES[0]


def test_missing_keys_from_an_older_writer_take_their_defaults() -> None:
    raw = json.loads(encode(SAMPLES[3]))
    for key in ("attempts", "interruptions", "abort_requested", "error", "version"):
        del raw[key]
    back = decode(SubmissionRecord, json.dumps(raw))
    assert back == SAMPLES[3]


def test_decode_accepts_bytes() -> None:
    assert decode(TurnRecord, encode(SAMPLES[5]).encode()) == SAMPLES[5]


def test_an_unknown_status_value_is_an_error() -> None:
    raw = json.loads(encode(SAMPLES[5]))
    raw["status"] = "exploded"
    with pytest.raises(ValueError):
        decode(TurnRecord, json.dumps(raw))
