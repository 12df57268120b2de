"""Tool progress over HTTP: a viewer connected during a call sees its progress as
``progress`` lines and in ``GET /sessions/{id}``; after the call the result replaces it."""

from __future__ import annotations

import httpx
from http_lines import is_turn_end, parsed, take_until, tool_started
from http_server import ALICE

from tests.kit.story import STORY
from tests.kit.world import assert_invariants

HTTP_TIMEOUT = httpx.Timeout(30.0)


def test_a_viewer_sees_the_running_calls_progress_and_then_its_result(served):
    app = served(scenario="abort-deploy")  # deploy reports progress, then takes 1 s
    app.start()
    with httpx.Client(timeout=HTTP_TIMEOUT) as http:
        body = {"sessionId": "s", "prompt": STORY}
        headers = {**ALICE, "Idempotency-Key": "progress-1"}
        with http.stream("POST", f"{app.url}/chat", headers=headers, json=body) as r:
            assert r.status_code == 200
            lines = parsed(r, progress=True)
            started = take_until(lines, tool_started("deploy"))[-1]
            shown = take_until(lines, lambda line: line["type"] == "progress")[-1]
            assert shown["data"] == {
                "task": started["data"]["task"],
                "tool": "deploy",
                "text": "deploying release 2.0",
            }
            assert shown["cursor"] >= started["cursor"]  # the last event's: not an event
            assert shown["turnId"] == started["turnId"]

            mid = http.get(f"{app.url}/sessions/s", headers=ALICE).json()
            assert mid["runningTask"]["taskId"] == started["data"]["task"]
            assert mid["runningTask"]["progress"] == "deploying release 2.0"
            assert mid["runningTask"]["progressAt"] > 0

            rest = take_until(lines, is_turn_end)
        assert rest[-1]["data"]["outcome"] == "completed"
        settled = [line for line in rest if line["type"] == "tool.completed"]
        assert settled[0]["data"]["result"] == "release 2.0 deployed"
        after = http.get(f"{app.url}/sessions/s", headers=ALICE).json()
        assert after["runningTask"] is None
    world = app.world_at_rest()
    deploy = world.task("deploy", world.submissions[0].request_id)
    assert (deploy.progress, deploy.result) == (None, "release 2.0 deployed")
    assert_invariants(world, [world.submissions[0].request_id], sessions=1)
