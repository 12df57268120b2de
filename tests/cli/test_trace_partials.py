"""The trace marks text streamed by a call whose process died as an aborted partial, and
shows the advisory of a submission that failed after interruptions."""

from __future__ import annotations

import io

from fxdurable.cli.render import Style, describe
from fxdurable.cli.trace import aborted_partials
from fxdurable.core.codec import JsonValue
from fxdurable.core.records import EventRecord


def ev(seq: int, type_: str, turn: str = "t1", **data: JsonValue) -> EventRecord:
    return EventRecord(session_id="s", seq=seq, type=type_, turn_id=turn, data=data, at=0.0)


def test_partials_before_an_interruption_are_aborted() -> None:
    events = [
        ev(1, "model.partial", round=0, text="Hel"),
        ev(2, "model.partial", round=0, text="lo"),
        ev(3, "attempt.interrupted", number=1),
        ev(4, "model.completed", round=0, text="Hello"),
    ]
    assert aborted_partials(events) == {1, 2}


def test_partials_of_a_finished_call_are_not_aborted() -> None:
    events = [
        ev(1, "model.partial", round=0, text="Hel"),
        ev(2, "model.completed", round=0, text="Hello"),
        ev(3, "attempt.interrupted", number=1),
        ev(4, "model.partial", round=1, text="x", turn="t2"),
    ]
    assert aborted_partials(events) == set(), "another turn's interruption is not this one's"


def test_the_trace_shows_the_interrupted_advisory() -> None:
    style = Style(io.StringIO())  # not a terminal: plain text
    advisory = ev(
        5,
        "submission.interrupted",
        submission="sub-1",
        interruptions=2,
        unknown_calls=["deploy (t1:0:0)"],
        reason="attempts_exhausted",
    )
    line = describe(advisory, style)
    assert line is not None
    assert "interrupted 2 times" in line and "attempts_exhausted" in line
    assert "deploy (t1:0:0)" in line


def test_the_trace_shows_a_cut_reply_closed_out() -> None:
    line = describe(
        ev(4, "model.interrupted", round=0, text="Roses are red,"), Style(io.StringIO())
    )
    assert line is not None and "cut off in round 0" in line and "Roses are red," in line
