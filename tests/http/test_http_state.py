"""Persisted state over HTTP: ``GET /sessions/{id}`` shows what the session's tools committed
with ``ctx.state`` (owner-checked like every route), and the chat stream carries each change as
a ``state.changed`` line, just before the result it committed with."""

from __future__ import annotations

import httpx
from http_lines import is_turn_end, parsed, take_until
from http_server import ALICE, BOB

from tests.kit.world import assert_invariants

HTTP_TIMEOUT = httpx.Timeout(30.0)


def test_the_session_shows_its_committed_state_and_the_stream_each_change(served):
    app = served()
    app.start()
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        before = http.get(f"{app.url}/sessions/s", headers=ALICE)
        assert before.status_code == 404
        body = {"sessionId": "s", "prompt": "welcome ada"}
        headers = {**ALICE, "Idempotency-Key": "state-1"}
        with http.stream("POST", f"{app.url}/chat", headers=headers, json=body) as r:
            assert r.status_code == 200
            lines = take_until(parsed(r), is_turn_end)
        kinds = [line["type"] for line in lines]
        change = lines[kinds.index("state.changed")]
        assert change["data"]["set"] == {"welcomed": "ada"}
        assert change["data"]["tool"] == "send_welcome"
        assert kinds[kinds.index("state.changed") + 1] == "tool.completed"

        session = http.get(f"{app.url}/sessions/s", headers=ALICE).json()
        assert session["state"] == {"welcomed": "ada"}
        # Another principal's "s" is another session: empty, never alice's state.
        assert http.get(f"{app.url}/sessions/s", headers=BOB).status_code == 404
    world = app.world_at_rest()
    assert_invariants(world, [world.submissions[0].request_id], sessions=1)
