"""Subagents over HTTP: a viewer of the parent sees the child's progress in the parent's
running call, the call names its child, and the child (the parent's owner's) names its parent."""

from __future__ import annotations

import httpx
from http_lines import is_turn_end, parsed, take_until, tool_started
from http_server import ALICE, BOB

from tests.kit.delegation import delegated_text
from tests.kit.world import assert_invariants

HTTP_TIMEOUT = httpx.Timeout(30.0)


def test_a_viewer_of_the_parent_sees_the_child_at_work_and_can_follow_it(served):
    app = served(scenario="delegate", extra_env={"FXD_TEST_RESEARCH_S": "1.0"})
    app.start()
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        body = {"sessionId": "s", "prompt": "delegate crash"}
        headers = {**ALICE, "Idempotency-Key": "delegate-1"}
        with http.stream("POST", f"{app.url}/chat", headers=headers, json=body) as r:
            assert r.status_code == 200
            lines = parsed(r, progress=True)
            started = take_until(lines, tool_started("research"))[-1]

            def child_tool_shown(line: dict) -> bool:
                return line["type"] == "progress" and "lookup crash-a" in line["data"]["text"]

            shown = take_until(lines, child_tool_shown)[-1]
            assert shown["data"]["tool"] == "research"
            assert shown["data"]["task"] == started["data"]["task"]
            # The child's streamed model text came first, then its tool's progress.
            assert shown["data"]["text"].startswith("Looking into crash a.")

            mid = http.get(f"{app.url}/sessions/s", headers=ALICE).json()
            running = mid["runningTask"]
            assert running["taskId"] == started["data"]["task"]
            assert "lookup crash-a" in running["progress"]
            child = running["childSession"]
            assert child.startswith("sub-x") and "/" not in child  # a public id
            shown_child = http.get(f"{app.url}/sessions/{child}", headers=ALICE).json()
            assert (shown_child["parentSession"], shown_child["parentTask"]) == (
                "s",
                started["data"]["task"],
            )
            assert shown_child["agent"] == "crash-researcher"
            # Another principal cannot see it, like any session of alice's.
            assert http.get(f"{app.url}/sessions/{child}", headers=BOB).status_code == 404

            rest = take_until(lines, is_turn_end)
        assert rest[-1]["data"]["outcome"] == "completed"
        assert rest[-1]["data"]["text"] == delegated_text("crash")
        assert http.get(f"{app.url}/sessions/s", headers=ALICE).json()["runningTask"] is None
    world = app.world_at_rest()
    requests = sorted(s.request_id for s in world.submissions)
    assert len(requests) == 2 and requests[1].startswith("subagent:x"), requests
    assert_invariants(world, requests, sessions=2)
