"""The record encoding as stores hold it today, pinned: what a faster codec must read back.

``fixtures/records_v1.jsonl`` is the encoding of ``RECORDS`` by ``core/recordcodec.py``
(sorted keys, compact, UTF-8 as is), generated once and committed: each line must decode to
the same record and encode back to the same bytes (the canonical bytes Redis members and
DynamoDB bodies keep). A C-speed codec (issue 23 §2) must pass this unchanged; the last test
shows ``pydantic_core.from_json`` parses each line as ``json.loads`` does, so decoding can move
to it without a migration (the core may not import it: tests/core/test_layers.py).
Regenerate the fixture only for a deliberate, versioned change of the encoding.
"""

from __future__ import annotations

import json
from pathlib import Path

from fxdurable.core.recordcodec import decode, encode
from fxdurable.core.records import (
    AttachmentRef,
    ErrorInfo,
    InputAnswer,
    InputRequest,
    Lease,
    StepRecord,
    Usage,
)
from fxdurable.core.states import SessionStatus, SubmissionStatus, ToolTaskStatus
from fxdurable.testing.store_contract.builders import a_session, a_submission, a_task, an_event
from fxdurable.testing.store_contract.primitives import one_of_each

FIXTURE = Path(__file__).parent / "fixtures" / "records_v1.jsonl"

RECORDS = [
    *one_of_each().values(),
    a_session(
        "s-rich",
        status=SessionStatus.IDLE,
        lease=Lease(owner="w1", token=7, expires_at=1.5e9, host="h", pid=42),
        steering=("stop ☃", 'quote " and \\ backslash'),
        state={"n": 1, "f": 0.1, "big": 2**70, "neg": -3.25e-8, "nested": {"a": [1, None, True]}},
        spent=Usage(input_tokens=10, output_tokens=3),
        last_outcome="completed",
    ),
    a_submission(
        "s-rich",
        2,
        status=SubmissionStatus.FAILED,
        error=ErrorInfo(code="exhausted", message="ünïcode\nnewline", unknown_calls=("t/1",)),
        attachments=(AttachmentRef(media_type="image/png", digest="ab" * 32, size=3),),
        input_request=InputRequest(
            question="go on?",
            about="exhausted",
            asked_at=2.0,
            answer=InputAnswer(kind="allow", at=3.0),
        ),
    ),
    a_task(
        status=ToolTaskStatus.COMPLETED,
        result="line\ttab 😀",
        durable=True,
        steps=(StepRecord(name="fetch", value='{"x":1}', run=1, at=4.0),),
    ),
    an_event("s-rich", 9, data={"emoji": "😀", "list": [1.5, "x", {"k": None}]}),
]


def _lines() -> list[str]:
    return FIXTURE.read_text(encoding="utf-8").splitlines()


def test_the_fixture_reads_back_as_the_records_it_was_written_from() -> None:
    lines = _lines()
    assert len(lines) == len(RECORDS)
    for line, record in zip(lines, RECORDS, strict=True):
        assert decode(type(record), line) == record
        assert decode(type(record), line.encode()) == record  # Redis hands back bytes


def test_the_encoding_is_byte_for_byte_what_was_stored() -> None:
    for line, record in zip(_lines(), RECORDS, strict=True):
        assert encode(record) == line
        assert encode(decode(type(record), line)) == line


def test_the_decoder_parses_as_json_loads_did() -> None:
    import pydantic_core

    for line in _lines():
        assert pydantic_core.from_json(line) == json.loads(line)
