"""``POST /sessions/{id}/fork`` against a real ``fxdurable serve``: the caller's own session
from the conversation as it was after a submission or any recorded step; owner-checked like
every session route, idempotent on (source, new id, point)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from http_server import ALICE, BOB, ServedApp

from fxdurable.http.scoping import session_key
from fxdurable.testing.invariants import check_store
from tests.kit.story import FOLLOW_UP, STORY
from tests.kit.world import read_store

HTTP = httpx.Client(timeout=httpx.Timeout(30.0))


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


def _chat(app: ServedApp, session_id: str, prompt: str) -> str:
    """The turn's outcome, read from its last line."""
    body = {"sessionId": session_id, "prompt": prompt}
    with HTTP.stream("POST", f"{app.url}/chat", headers=ALICE, json=body) as r:
        assert r.status_code == 200, r.read()
        last = list(r.iter_lines())[-1]
    return str(httpx.Response(200, content=last).json()["data"]["outcome"])


def _fork(
    app: ServedApp, body: dict[str, object], headers: dict[str, str] = ALICE
) -> httpx.Response:
    return HTTP.post(f"{app.url}/sessions/s/fork", headers=headers, json=body)


def test_a_fork_over_http_is_the_callers_and_takes_a_next_message(served):
    app = served()
    app.start()
    assert _chat(app, "s", STORY) == "completed"
    first = HTTP.get(f"{app.url}/sessions/s", headers=ALICE).json()["submissions"][0]["id"]
    assert _chat(app, "s", FOLLOW_UP) == "completed"

    made = _fork(app, {"newSessionId": "f", "after": first})
    assert made.status_code == 201, made.text
    reply = made.json()
    assert reply["sessionId"] == "f" and reply["forkedFrom"] == "s" and reply["created"]
    again = _fork(app, {"newSessionId": "f", "after": first})
    assert again.status_code == 200 and again.json() == {**reply, "created": False}

    history = HTTP.get(f"{app.url}/sessions/f/history", headers=ALICE).json()["messages"]
    source = HTTP.get(f"{app.url}/sessions/s/history", headers=ALICE).json()["messages"]
    assert history == source[: len(history)] and len(history) < len(source)
    assert [m["text"] for m in history if m["role"] == "user"] == [STORY]

    # Refusals: another's session, an id already used, a point the session does not have.
    assert _fork(app, {"newSessionId": "g"}, headers=BOB).json()["code"] == "session_not_found"
    taken = _fork(app, {"newSessionId": "s"})
    assert (taken.status_code, taken.json()["code"]) == (409, "session_exists")
    assert "'s'" in taken.json()["message"] and "alice" not in taken.json()["message"]
    for after in (10_000, "sub-nope"):
        bad = _fork(app, {"newSessionId": "g", "after": after})
        assert (bad.status_code, bad.json()["code"]) == (422, "bad_fork_point"), bad.text
    assert _fork(app, {"newSessionId": "g", "after": 0}).status_code == 422
    # Not an integer is not a cursor: JSON true was once read as cursor 1 (bool is an int in
    # Python), 1.0 as 1.
    for after in (True, False, 1.0, 1.5, [1], {"cursor": 1}):
        bad = _fork(app, {"newSessionId": "g", "after": after})
        assert bad.status_code == 422 and "after" in bad.json()["message"], (after, bad.text)
    assert HTTP.get(f"{app.url}/sessions/g", headers=ALICE).status_code == 404

    # Its stream names its source by the public id, never by alice's store key.
    with HTTP.stream("GET", f"{app.url}/chat?sessionId=f&cursor=0", headers=ALICE) as r:
        created = httpx.Response(200, content=next(r.iter_lines())).json()
    assert created["type"] == "session.created", created
    assert created["data"]["forked_from"] == "s" and created["sessionId"] == "f", created

    # The fork is alice's, at rest, and goes on from its point.
    assert _chat(app, "f", FOLLOW_UP) == "completed"
    assert HTTP.get(f"{app.url}/sessions/f", headers=BOB).status_code == 404
    owners = read_store(app.store_url, lambda v: {s.id: s.owner for s in v.list_sessions()})
    assert owners == {session_key("alice", "s"): "alice", session_key("alice", "f"): "alice"}
    summary = read_store(app.store_url, lambda v: check_store(v, now=0.0, at_rest=True))
    assert summary.violations == ()
