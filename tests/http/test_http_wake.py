"""``POST /wake`` against a real server: only a fresh signature over the exact body wakes a
session, and a signed wake runs queued work to rest in the request."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from http_server import ALICE, WAKE_SECRET, ServedApp

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.http.scoping import session_key
from fxdurable.http.signing import SIGNATURE_HEADER, sign_wake
from tests.kit.story import AGENT, DONE_TEXT, STORY, STORY_REQUEST
from tests.kit.world import assert_invariants

TIMEOUT = httpx.Timeout(30.0)
HTTP = httpx.Client(timeout=TIMEOUT)
# A wake names the session by its store key: alice's "s" (fxdurable.http.scoping).
ALICES_S = session_key("alice", "s")
BODY = json.dumps({"sessionId": ALICES_S, "reason": "test"}).encode()
T = TypeVar("T")


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


def quiet_server(served: Callable[..., ServedApp], **env: str) -> ServedApp:
    # The local queue's periodic scan wakes any active session nobody holds (it does not wait
    # FXD_SCAN_QUIET_S; that is for durable queues). Push it out of the test's way, so only a
    # /wake can run what the test admits behind the server's back.
    app = served(extra_env={"FXD_SCAN_INTERVAL_S": "3600", **env})
    app.start()
    return app


def with_store(app: ServedApp, body: Callable[[Any], T]) -> T:
    store = open_store(app.store_url)
    try:
        return body(store)
    finally:
        store.close()


def admit_behind_the_servers_back(app: ServedApp) -> str:
    """Admit the story into alice's session "s" straight in the store: no wake is enqueued
    for it."""

    def admit(store: Any) -> str:
        journal = Journal(store, SystemClock(), RandomIds())
        admission = journal.admit(
            ALICES_S, agent=AGENT, prompt=STORY, request_id=STORY_REQUEST, owner="alice"
        )
        return admission.submission.id

    return with_store(app, admit)


def status(app: ServedApp, submission_id: str) -> str:
    sub = with_store(app, lambda s: s.read(lambda v: v.get_submission(submission_id)))
    assert sub is not None
    return str(sub.status)


def wake(app: ServedApp, body: bytes, signature: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers[SIGNATURE_HEADER] = signature
    return HTTP.post(f"{app.url}/wake", content=body, headers=headers)


def assert_refused(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["code"] == code and body["message"], body
    assert "Traceback" not in r.text


def test_only_a_fresh_signature_over_the_exact_body_wakes_a_session(served):
    app = quiet_server(served)
    submission_id = admit_behind_the_servers_back(app)
    now = time.time()
    tampered = BODY.replace(b'"test"', b'"tset"')
    assert tampered != BODY
    refused = {
        "forged": wake(app, BODY, sign_wake("another-secret-0123456789", BODY)),
        "stale": wake(app, BODY, sign_wake(WAKE_SECRET, BODY, timestamp=now - 600)),
        "from the future": wake(app, BODY, sign_wake(WAKE_SECRET, BODY, timestamp=now + 600)),
        "missing": wake(app, BODY, None),
        "malformed": wake(app, BODY, "v1=" + sign_wake(WAKE_SECRET, BODY).split("v1=")[1]),
        "tampered": wake(app, tampered, sign_wake(WAKE_SECRET, BODY)),
        # Same JSON, other bytes: the signature covers the bytes, not their meaning.
        "reformatted": wake(
            app, json.dumps(json.loads(BODY), indent=1).encode(), sign_wake(WAKE_SECRET, BODY)
        ),
    }
    for what, r in refused.items():
        assert_refused(r, 401, "bad_signature")
        assert WAKE_SECRET not in r.text, what
    # Still queued: none of them woke it (nothing else would, with the scan pushed out).
    time.sleep(0.3)
    assert status(app, submission_id) == "queued"
    assert not (app.workdir / "calls.log").exists()

    # A signed wake runs it to rest before it answers.
    r = wake(app, BODY, sign_wake(WAKE_SECRET, BODY))
    assert r.status_code == 200, r.text
    assert r.json() == {"sessionId": ALICES_S, "status": "idle"}
    assert status(app, submission_id) == "completed"
    world = app.world_at_rest()
    assert_invariants(world, [STORY_REQUEST], sessions=1)
    assert world.submission().result_text == DONE_TEXT
    assert [e.tool for e in world.effects] == ["charge", "deploy"]

    # A replay within the window is only a hint: the records say there is nothing to do.
    again = wake(app, BODY, r.request.headers[SIGNATURE_HEADER])
    assert again.status_code == 200 and again.json()["status"] == "idle"
    assert app.world_at_rest().effects == world.effects
    # The owner sees the finished work over the API.
    session = HTTP.get(f"{app.url}/sessions/s", headers=ALICE).json()
    assert [(s["id"], s["status"]) for s in session["submissions"]] == [
        (submission_id, "completed")
    ]
    assert "Traceback" not in app.output()


def test_a_signed_wake_for_an_unknown_session_or_a_bad_body_is_refused(served):
    app = quiet_server(served)

    def signed(body: bytes) -> httpx.Response:
        return wake(app, body, sign_wake(WAKE_SECRET, body))

    assert_refused(signed(b'{"sessionId": "nope"}'), 404, "session_not_found")
    assert_refused(signed(b'{"sessionId": "alice/nope"}'), 404, "session_not_found")
    assert_refused(signed(b'{"sessionId": "s"'), 400, "malformed_json")
    assert_refused(signed(b'{"sessionId": "s", "extra": 1}'), 422, "invalid_request")
    assert_refused(signed(b'{"sessionId": "-s"}'), 422, "invalid_request")
    assert_refused(signed(b'{"sessionId": "alice/"}'), 422, "invalid_request")
    assert_refused(signed(b'{"sessionId": "alice/s s"}'), 422, "invalid_request")
    assert with_store(app, lambda s: s.read(lambda v: v.list_sessions())) == []
    assert "Traceback" not in app.output()


def test_without_a_wake_secret_the_route_is_off(served):
    app = quiet_server(served, FXD_WAKE_SECRET="")
    submission_id = admit_behind_the_servers_back(app)
    for signature in (sign_wake(WAKE_SECRET, BODY), None):
        assert_refused(wake(app, BODY, signature), 404, "wake_disabled")
    assert status(app, submission_id) == "queued"
