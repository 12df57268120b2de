"""``POST /sessions/{id}/answer`` against a real ``fxdurable serve`` (the crash driver's ``ask``
scenario: the story agent's hook asks a person before ``deploy``).

The chat stream shows the question (an ``input.requested`` line) and stays open; the session
view names it; the answer is owner-checked like every session route (404 for another
caller's session), 409 when nothing waits, 422 for a malformed body or a rewrite whose input
does not fit the tool; after ``allow`` the same stream carries the deploy and ends the turn.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from http_server import ALICE, BOB, ServedApp

from fxdurable.testing.invariants import check_store
from tests.kit.story import DONE_TEXT, STORY, question_for
from tests.kit.world import read_store

HTTP = httpx.Client(timeout=httpx.Timeout(30.0))
QUESTION = question_for("deploy", '{"version": "2.0"}')


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


def _answer(app: ServedApp, body: object, headers: dict[str, str] = ALICE) -> httpx.Response:
    return HTTP.post(f"{app.url}/sessions/s/answer", headers=headers, json=body)


def test_a_question_is_streamed_answered_over_http_and_the_turn_goes_on(served):
    app = served(scenario="ask")
    app.start()
    lines: list[dict[str, object]] = []
    asked = threading.Event()

    def chat() -> None:
        body = {"sessionId": "s", "prompt": STORY}
        with HTTP.stream("POST", f"{app.url}/chat", headers=ALICE, json=body) as r:
            assert r.status_code == 200
            for raw in r.iter_lines():
                lines.append(json.loads(raw))
                if lines[-1]["type"] == "input.requested":
                    asked.set()

    streaming = threading.Thread(target=chat)
    streaming.start()
    assert asked.wait(30), lines
    requested = next(line for line in lines if line["type"] == "input.requested")
    assert requested["data"]["question"] == QUESTION  # type: ignore[index]

    (sub,) = HTTP.get(f"{app.url}/sessions/s", headers=ALICE).json()["submissions"]
    assert (sub["status"], sub["question"]) == ("running", QUESTION)

    assert _answer(app, {"answer": "allow"}, headers=BOB).status_code == 404
    assert _answer(app, {"answer": "maybe"}).status_code == 422
    assert _answer(app, {"answer": "allow", "reason": "x"}).status_code == 422
    bad = _answer(app, {"answer": "rewrite", "input": {"version": 2, "extra": True}})
    assert bad.status_code == 422 and bad.json()["code"] == "invalid_answer", bad.text
    assert "does not fit deploy" in bad.json()["message"]

    ok = _answer(app, {"answer": "allow"})
    assert ok.status_code == 200, ok.text
    reply = ok.json()
    assert reply["sessionId"] == "s" and reply["submissionId"] == sub["id"]
    assert reply["answer"] == "allow" and reply["cursor"] >= requested["cursor"]  # type: ignore[operator]
    again = _answer(app, {"answer": "allow"})
    assert again.status_code == 409 and again.json()["code"] == "no_pending_question"

    streaming.join(30)
    assert not streaming.is_alive()
    types = [line["type"] for line in lines]
    assert types.count("input.requested") == 1 and types.count("input.answered") == 1
    assert types.index("input.answered") < types.index(
        "tool.completed", types.index("input.answered")
    )
    end = lines[-1]
    assert end["type"] == "turn_end"
    assert end["data"] == {  # type: ignore[comparison-overlap]
        "submission": sub["id"],
        "text": DONE_TEXT,
        "outcome": "completed",
    }
    (after,) = HTTP.get(f"{app.url}/sessions/s", headers=ALICE).json()["submissions"]
    assert after["question"] is None
    assert _answer(app, {"answer": "deny", "reason": "late"}).status_code == 409
    app.stop()
    summary = read_store(app.store_url, lambda v: check_store(v, now=0.0, at_rest=True))
    assert summary.violations == ()


def test_answering_a_session_that_waits_for_nothing_is_409_and_an_unknown_one_404(served):
    app = served()
    app.start()
    assert _answer(app, {"answer": "allow"}).status_code == 404
    body = {"sessionId": "s", "prompt": "status?"}
    with HTTP.stream("POST", f"{app.url}/chat", headers=ALICE, json=body) as r:
        list(r.iter_lines())
    nothing = _answer(app, {"answer": "allow"})
    assert nothing.status_code == 409 and nothing.json()["error"] == "NoPendingQuestionError"
