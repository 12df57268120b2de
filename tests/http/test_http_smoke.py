"""The served app answers: a turn streams from turn_start to turn_end over a real socket."""

from __future__ import annotations

import httpx
from http_lines import parsed
from http_server import ALICE


def test_a_turn_streams_from_turn_start_to_turn_end(served):
    app = served()
    app.start()
    with httpx.stream(
        "POST",
        f"{app.url}/chat",
        headers=ALICE,
        json={
            "sessionId": "s",
            "prompt": "Read the state, charge order 42 and deploy release 2.0.",
        },
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = list(parsed(response))
    assert lines[0]["type"] == "turn_start" and lines[0]["sessionId"] == "s"
    assert lines[-1]["type"] == "turn_end" and lines[-1]["data"]["outcome"] == "completed"
    cursors = [line["cursor"] for line in lines]
    assert cursors == list(range(cursors[0], cursors[0] + len(cursors)))
