"""How ``fxdurable trace`` and the followers (the demo, the coding agent's run.py) show
steering: the text a person sent, and what became of it; not bare event names."""

from __future__ import annotations

import io

import pytest

from fxdurable.cli.render import Style, describe
from fxdurable.core.records import EventRecord


@pytest.mark.parametrize(
    ("kind", "data", "line"),
    [
        (
            "steer.recorded",
            {"text": "Also add one test for an empty cart."},
            "you (steering the running turn): Also add one test for an empty cart.",
        ),
        ("steer.delivered", {"round": 4, "count": 1}, "steering shown to the model in round 4"),
        (
            "steer.dropped",
            {"count": 1, "reason": "aborted"},
            "steering dropped with its turn (aborted)",
        ),
        (
            "steer.requeued",
            {"count": 1, "submission": "sub-2"},
            "steering arrived after its turn settled: queued as submission sub-2",
        ),
    ],
)
def test_steering_events_read_as_what_happened(kind: str, data: dict, line: str) -> None:  # type: ignore[type-arg]
    event = EventRecord(session_id="s", seq=9, type=kind, turn_id="sub-1", data=data, at=0.0)
    assert describe(event, Style(io.StringIO())) == line
