"""Every route of the HTTP API against a real ``fxdurable serve`` over a real socket: who may
see a session (ids are scoped per principal), idempotent and busy admission, steering and abort,
and what bad input gets."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pytest
from http_lines import Line, is_turn_end, parsed, take_until, tool_started
from http_server import ALICE, ALICE_TOKEN, BOB, WAKE_SECRET, ServedApp

from fxdurable.backends import open_store
from fxdurable.cli.trace import print_trace
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.http.route_base import request_id_for
from fxdurable.http.scoping import session_key
from fxdurable.http.signing import SIGNATURE_HEADER, sign_wake
from tests.kit.story import AGENT, FOLLOW_UP, STORY
from tests.kit.world import assert_invariants
from tests.kit.world import read_store as kit_read_store

TIMEOUT = httpx.Timeout(30.0)
# One client for the module: a new one per call costs ~80 ms (it builds an SSL context).
HTTP = httpx.Client(timeout=TIMEOUT)
T = TypeVar("T")
# Alice's session "s" as the store keys it: in her namespace (fxdurable.http.scoping).
ALICES_S = session_key("alice", "s")


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


# -- helpers ---------------------------------------------------------------------------------


def chat_stream(
    app: ServedApp,
    prompt: str,
    *,
    session_id: str | None = "s",
    headers: dict[str, str] = ALICE,
    key: str | None = None,
    **extra: Any,
) -> Any:
    """An open ``POST /chat`` (use as a context manager)."""
    body: dict[str, Any] = {"prompt": prompt, **extra}
    if session_id is not None:
        body["sessionId"] = session_id
    if key is not None:
        headers = {**headers, "Idempotency-Key": key}
    return HTTP.stream("POST", f"{app.url}/chat", headers=headers, json=body, timeout=TIMEOUT)


def chat(app: ServedApp, prompt: str, **kwargs: Any) -> tuple[httpx.Response, list[Line]]:
    """A whole ``POST /chat``: the response and, for a 200, every line of its stream."""
    with chat_stream(app, prompt, **kwargs) as r:
        if r.status_code != 200:
            r.read()
            return r, []
        return r, list(parsed(r))


def read_store(app: ServedApp, body: Callable[[Any], T]) -> T:
    return kit_read_store(app.store_url, body)


def event_types(app: ServedApp, session_id: str = ALICES_S) -> list[str]:
    return read_store(app, lambda v: [e.type for e in v.events(session_id)])


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """A JSON error with a stable code and a readable message, and never a stack trace."""
    assert "Traceback" not in response.text
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"], body
    return body


# -- who may see a session -------------------------------------------------------------------


def session_requests(app: ServedApp, headers: dict[str, str]) -> dict[str, httpx.Response]:
    """Every route that names session ``s``, except ``POST /chat`` (which creates it)."""
    url = app.url

    def get_chat(cursor: str) -> httpx.Response:
        with HTTP.stream(
            "GET",
            f"{url}/chat",
            params={"sessionId": "s", "cursor": cursor},
            headers=headers,
            timeout=TIMEOUT,
        ) as r:
            if r.status_code != 200:  # a 200 stays open until the idle timeout: not read
                r.read()
            return r

    return {
        "GET /chat": get_chat("0"),
        # Past the end would be 400 bad_cursor for the owner: that would reveal the session.
        "GET /chat past the end": get_chat("999"),
        "POST /steer": HTTP.post(
            f"{url}/steer", headers=headers, json={"sessionId": "s", "text": "x"}, timeout=TIMEOUT
        ),
        "POST /abort": HTTP.post(
            f"{url}/abort", headers=headers, json={"sessionId": "s"}, timeout=TIMEOUT
        ),
        "GET /sessions/s": HTTP.get(f"{url}/sessions/s", headers=headers, timeout=TIMEOUT),
        "GET /sessions/s/history": HTTP.get(
            f"{url}/sessions/s/history", headers=headers, timeout=TIMEOUT
        ),
        "POST /sessions/s/fork": HTTP.post(
            f"{url}/sessions/s/fork",
            headers=headers,
            json={"newSessionId": "s-fork"},
            timeout=TIMEOUT,
        ),
    }


def test_an_id_the_caller_does_not_hold_is_404_on_every_route_like_a_missing_one(served):
    app = served(scenario="abort")  # read_state takes 1 s: bob tries while alice's turn runs
    app.start()
    before = session_requests(app, BOB)  # no session "s" yet
    missing = {name: (r.status_code, r.json()) for name, r in before.items()}
    for r in before.values():
        assert_error(r, 404, "session_not_found")
    assert len({json.dumps(body) for _, body in missing.values()}) == 1, missing
    assert read_store(app, lambda v: v.list_sessions()) == []

    with chat_stream(app, STORY) as alices:
        assert alices.status_code == 200
        lines = parsed(alices)
        take_until(lines, tool_started("read_state"))

        # Alice's "s" is not bob's: to him it is as absent as before it existed.
        foreign = session_requests(app, BOB)
        for name, r in foreign.items():
            assert_error(r, 404, "session_not_found")
            # Byte for byte what a session that does not exist gets: an id reveals nothing.
            assert (r.status_code, r.json()) == next(iter(missing.values())), name
            assert r.text == before[name].text, name

        rest = take_until(lines, is_turn_end)

    # Bob changed nothing: alice's turn ran to its end, unsteered and unaborted.
    assert rest[-1]["data"]["outcome"] == "completed"
    types = event_types(app)
    assert types.count("submission.admitted") == 1
    assert "steer.recorded" not in types and "abort.requested" not in types
    subs = read_store(app, lambda v: v.submissions(ALICES_S))
    assert [(s.prompt, str(s.status)) for s in subs] == [(STORY, "completed")]
    owners = read_store(app, lambda v: [(s.id, s.owner) for s in v.list_sessions()])
    assert owners == [(ALICES_S, "alice")]

    # Alice, by contrast, sees all of it.
    for name, r in session_requests(app, ALICE).items():
        if name == "GET /chat past the end":
            assert_error(r, 400, "bad_cursor")
        elif name == "POST /sessions/s/fork":
            assert r.status_code == 201, (name, r.text)
        else:
            assert r.status_code == 200, (name, r.text)


def _signed_wake(app: ServedApp, key: str) -> httpx.Response:
    body = json.dumps({"sessionId": key}).encode()
    headers = {SIGNATURE_HEADER: sign_wake(WAKE_SECRET, body)}
    return HTTP.post(f"{app.url}/wake", headers=headers, content=body, timeout=TIMEOUT)


def _reconnect_until_turn_end(app: ServedApp, headers: dict[str, str]) -> list[Line]:
    with HTTP.stream(
        "GET",
        f"{app.url}/chat",
        params={"sessionId": "ops-1", "cursor": "0"},
        headers=headers,
        timeout=TIMEOUT,
    ) as r:
        assert r.status_code == 200, r.read()
        return take_until(parsed(r), is_turn_end)


def test_two_users_with_the_same_session_id_have_two_sessions_on_every_route(served):
    """Session ids are scoped per principal: alice's ops-1 and bob's ops-1 are two sessions,
    and every route shows each of them only their own, under the id they chose."""
    app = served(scenario="abort")  # read_state takes 1 s: time to steer and to abort
    app.start()
    users = {"alice": ALICE, "bob": BOB}
    prompts = {"alice": STORY, "bob": "story bob"}
    streams = {
        who: chat_stream(app, prompts[who], session_id="ops-1", headers=users[who]) for who in users
    }
    seen: dict[str, list[Line]] = {}
    subs: dict[str, str] = {}
    with streams["alice"] as alices:
        assert alices.status_code == 200 and alices.headers["X-Fxd-Session-Id"] == "ops-1"
        subs["alice"] = alices.headers["X-Fxd-Submission-Id"]
        alice_lines = parsed(alices)
        seen["alice"] = take_until(alice_lines, tool_started("read_state"))
        steer = HTTP.post(
            f"{app.url}/steer",
            headers=ALICE,
            json={"sessionId": "ops-1", "text": STEER_TEXT},
            timeout=TIMEOUT,
        ).json()
        assert (steer["sessionId"], steer["steered"]) == ("ops-1", True), steer
        assert steer["submissionId"] == subs["alice"]

        # Bob picks the same id: a session of his own, not a 404 and not alice's.
        with streams["bob"] as bobs:
            assert bobs.status_code == 200 and bobs.headers["X-Fxd-Session-Id"] == "ops-1"
            subs["bob"] = bobs.headers["X-Fxd-Submission-Id"]
            assert subs["bob"] != subs["alice"]
            bob_lines = parsed(bobs)
            seen["bob"] = take_until(bob_lines, tool_started("read_state"))
            abort = HTTP.post(
                f"{app.url}/abort", headers=BOB, json={"sessionId": "ops-1"}, timeout=TIMEOUT
            )
            assert abort.json() == {"sessionId": "ops-1", "aborted": [subs["bob"]]}
            seen["bob"] += take_until(bob_lines, is_turn_end)
        seen["alice"] += take_until(alice_lines, is_turn_end)

    # Alice's turn took her steer and completed; bob's was aborted; neither saw the other.
    assert seen["alice"][-1]["data"]["outcome"] == "completed"
    assert seen["bob"][-1]["data"]["outcome"] == "aborted"
    types = {who: [line["type"] for line in lines] for who, lines in seen.items()}
    assert "steer.recorded" in types["alice"] and "abort.requested" not in types["alice"]
    assert "abort.requested" in types["bob"] and "steer.recorded" not in types["bob"]
    for who, headers in users.items():
        other = subs["bob" if who == "alice" else "alice"]
        assert {line["sessionId"] for line in seen[who]} == {"ops-1"}
        assert other not in json.dumps(seen[who])
        # GET /chat replays their own turn, line for line, after the session's creation.
        replay = _reconnect_until_turn_end(app, headers)
        assert replay[0]["type"] == "session.created" and replay[1:] == seen[who], who
        state = HTTP.get(f"{app.url}/sessions/ops-1", headers=headers, timeout=TIMEOUT).json()
        assert state["sessionId"] == "ops-1"
        assert [(s["id"], s["prompt"]) for s in state["submissions"]] == [(subs[who], prompts[who])]
        history = HTTP.get(f"{app.url}/sessions/ops-1/history", headers=headers, timeout=TIMEOUT)
        users_said = [m["text"] for m in history.json()["messages"] if m["role"] == "user"]
        assert users_said == ([STORY, STEER_TEXT] if who == "alice" else [prompts["bob"]])

    # Below HTTP the two are keyed by principal: what wakes, traces and workers name.
    owners = read_store(app, lambda v: {s.id: s.owner for s in v.list_sessions()})
    assert owners == {"alice/ops-1": "alice", "bob/ops-1": "bob"}
    timeline = io.StringIO()
    store = open_store(app.store_url)
    try:
        assert print_trace(store, "alice/ops-1", timeline) == 0
    finally:
        store.close()
    assert "session alice/ops-1" in timeline.getvalue(), timeline.getvalue()
    woken = _signed_wake(app, "alice/ops-1")
    assert woken.json() == {"sessionId": "alice/ops-1", "status": "idle"}, woken.text
    assert_error(_signed_wake(app, "ops-1"), 404, "session_not_found")  # nobody's, yet

    # An in-process session (owner None) keeps its plain id, out of every HTTP caller's reach.
    store = open_store(app.store_url)
    try:
        journal = Journal(store, SystemClock(), RandomIds())
        in_process = journal.admit("ops-1", agent=AGENT, prompt=FOLLOW_UP).submission
    finally:
        store.close()
    assert in_process.session_id == "ops-1"
    assert _signed_wake(app, "ops-1").json()["sessionId"] == "ops-1"
    state = HTTP.get(f"{app.url}/sessions/ops-1", headers=ALICE, timeout=TIMEOUT).json()
    assert [s["id"] for s in state["submissions"]] == [subs["alice"]]
    # Alice's story charged and deployed once; bob's was aborted before either.
    world = app.world_at_rest()
    assert [e.tool for e in world.effects] == ["charge", "deploy"]
    assert "Traceback" not in app.output()


BAD_CREDENTIALS = {
    "none": {},
    "wrong token": {"Authorization": "Bearer not-a-token-0123456789abcdef"},
    "alice's token plus a character": {"Authorization": f"Bearer {ALICE_TOKEN}x"},
    "alice's token minus a character": {"Authorization": f"Bearer {ALICE_TOKEN[:-1]}"},
    "alice's token as Basic": {"Authorization": f"Basic {ALICE_TOKEN}"},
    "alice's token without a scheme": {"Authorization": ALICE_TOKEN},
    "an empty bearer": {"Authorization": "Bearer"},
}


def test_every_authenticated_route_answers_401_without_valid_credentials(served):
    app = served()
    app.start()
    assert chat(app, STORY)[1][-1]["data"]["outcome"] == "completed"
    before = event_types(app)

    for what, headers in BAD_CREDENTIALS.items():
        answers = session_requests(app, headers)
        answers["POST /chat"] = chat(app, "x", headers=headers)[0]
        answers["POST /chat new session"] = chat(app, "x", session_id="t", headers=headers)[0]
        # Credentials are checked before the body is even read.
        answers["POST /chat bad body"] = HTTP.post(
            f"{app.url}/chat", headers=headers, content=b"{nope", timeout=TIMEOUT
        )
        for name, r in answers.items():
            assert_error(r, 401, "unauthorized")
            assert ALICE_TOKEN not in r.text, (what, name)

    # Nothing was admitted, steered, aborted or created.
    assert event_types(app) == before
    assert [s.id for s in read_store(app, lambda v: v.list_sessions())] == [ALICES_S]
    # The public routes stay public.
    assert HTTP.get(f"{app.url}/healthz", timeout=TIMEOUT).status_code == 200
    assert "/chat" in HTTP.get(f"{app.url}/openapi.json", timeout=TIMEOUT).json()["paths"]


# -- idempotent admission ----------------------------------------------------------------------


def test_a_post_retried_with_its_idempotency_key_is_one_submission(served):
    app = served()
    app.start()
    first, lines = chat(app, STORY, key="order-42")
    again, replayed = chat(app, STORY, key="order-42")

    submission_id = first.headers["X-Fxd-Submission-Id"]
    assert again.headers["X-Fxd-Submission-Id"] == submission_id
    assert lines[-1]["data"]["outcome"] == "completed"
    assert replayed == lines  # the retry streams the same turn, not a new one
    session = HTTP.get(f"{app.url}/sessions/s", headers=ALICE, timeout=TIMEOUT).json()
    assert [s["id"] for s in session["submissions"]] == [submission_id]
    found = read_store(
        app, lambda v: v.get_submission_by_request(request_id_for("alice", "order-42"))
    )
    assert found is not None and found.id == submission_id
    # Charged and deployed once.
    world = app.world_at_rest()
    assert_invariants(world, [request_id_for("alice", "order-42")], sessions=1)

    # The same key for other work is refused, and nothing is admitted.
    conflict, _ = chat(app, "something else", key="order-42")
    body = assert_error(conflict, 409, "idempotency_conflict")
    assert body["error"] == "RequestConflictError"
    conflict, _ = chat(app, STORY, session_id="elsewhere", key="order-42")
    assert_error(conflict, 409, "idempotency_conflict")
    assert event_types(app).count("submission.admitted") == 1
    assert [s.id for s in read_store(app, lambda v: v.list_sessions())] == [ALICES_S]


def test_a_key_without_a_session_id_finds_the_session_its_first_try_created(served):
    app = served()
    app.start()
    first, lines = chat(app, FOLLOW_UP, session_id=None, key="k-1")
    again, replayed = chat(app, FOLLOW_UP, session_id=None, key="k-1")
    session_id = first.headers["X-Fxd-Session-Id"]
    assert again.headers["X-Fxd-Session-Id"] == session_id
    assert again.headers["X-Fxd-Submission-Id"] == first.headers["X-Fxd-Submission-Id"]
    assert replayed == lines and lines[-1]["data"]["outcome"] == "completed"
    session = HTTP.get(f"{app.url}/sessions/{session_id}", headers=ALICE, timeout=TIMEOUT)
    assert len(session.json()["submissions"]) == 1

    # Keys are scoped per user: bob's "k-1" is his own, new submission in his own session.
    bobs, bob_lines = chat(app, FOLLOW_UP, session_id=None, headers=BOB, key="k-1")
    assert bobs.status_code == 200 and bob_lines[-1]["data"]["outcome"] == "completed"
    assert bobs.headers["X-Fxd-Session-Id"] != session_id
    assert bobs.headers["X-Fxd-Submission-Id"] != first.headers["X-Fxd-Submission-Id"]
    owners = read_store(app, lambda v: {s.id: s.owner for s in v.list_sessions()})
    assert owners == {
        session_key("alice", session_id): "alice",
        session_key("bob", bobs.headers["X-Fxd-Session-Id"]): "bob",
    }

    # The longest key allowed is a key like any other.
    longest, _ = chat(app, FOLLOW_UP, session_id=None, key="k" * 200)
    assert longest.status_code == 200
    retried, _ = chat(app, FOLLOW_UP, session_id=None, key="k" * 200)
    for header in ("X-Fxd-Session-Id", "X-Fxd-Submission-Id"):
        assert retried.headers[header] == longest.headers[header]

    # A different prompt under the same key is a conflict, found through the key alone.
    conflict, _ = chat(app, "other work", session_id=None, key="k-1")
    assert_error(conflict, 409, "idempotency_conflict")
    assert len(read_store(app, lambda v: v.list_sessions())) == 3


def _one_try(app: ServedApp, key: str, barrier: threading.Barrier) -> tuple[Any, ...]:
    barrier.wait()  # every try admits at the same moment
    r, lines = chat(app, FOLLOW_UP, session_id=None, key=key)
    outcome = lines[-1]["data"]["outcome"] if lines else r.text
    return (
        r.status_code,
        r.headers.get("X-Fxd-Session-Id"),
        r.headers.get("X-Fxd-Submission-Id"),
        outcome,
    )


def test_concurrent_tries_of_one_request_without_a_session_id_are_one_submission(served):
    # Each try makes up a session id before admitting; the loser of the race must land in
    # the winner's session, not answer 409 (it is the same request, DESIGN §3.3).
    app = served()
    app.start()
    tries, rounds = 8, 5
    with ThreadPoolExecutor(tries) as pool:
        for round_ in range(rounds):
            barrier = threading.Barrier(tries, timeout=30)
            futures = [pool.submit(_one_try, app, f"race-{round_}", barrier) for _ in range(tries)]
            answers = [f.result(timeout=60) for f in futures]
            assert len(set(answers)) == 1, answers
            status, session_id, submission_id, outcome = answers[0]
            assert (status, outcome) == (200, "completed")
            key = session_key("alice", session_id)
            subs = read_store(app, lambda v, key=key: v.submissions(key))
            assert [s.id for s in subs] == [submission_id]
    assert len(read_store(app, lambda v: v.list_sessions())) == rounds


# -- a busy session --------------------------------------------------------------------------


def test_when_busy_reject_answers_409_agent_busy_and_admits_nothing(served):
    app = served(scenario="abort")  # read_state takes 1 s
    app.start()
    with chat_stream(app, STORY) as running:
        lines = parsed(running)
        take_until(lines, tool_started("read_state"))
        refused, _ = chat(app, FOLLOW_UP, key="busy-1", whenBusy="reject")
        body = assert_error(refused, 409, "agent_busy")
        assert body["error"] == "AgentBusyError"
        assert read_store(app, lambda v: len(v.submissions(ALICES_S))) == 1
        rest = take_until(lines, is_turn_end)
    assert rest[-1]["data"]["outcome"] == "completed"
    assert event_types(app).count("submission.admitted") == 1
    rid = request_id_for("alice", "busy-1")
    assert read_store(app, lambda v: v.get_submission_by_request(rid)) is None

    # Idle now: the same request (same key, nothing was bound to it) is admitted and runs.
    accepted, turn = chat(app, FOLLOW_UP, key="busy-1", whenBusy="reject")
    assert accepted.status_code == 200
    assert turn[-1]["data"]["outcome"] == "completed"
    assert read_store(app, lambda v: v.get_submission_by_request(rid)) is not None


# -- steering and abort ----------------------------------------------------------------------

STEER_TEXT = "Also say which release runs now."


def test_steering_a_running_turn_reaches_its_next_model_call(served):
    app = served(scenario="abort")  # read_state takes 1 s: time to steer
    app.start()
    with chat_stream(app, STORY) as running:
        submission_id = running.headers["X-Fxd-Submission-Id"]
        lines = parsed(running)
        seen = take_until(lines, tool_started("read_state"))
        r = HTTP.post(
            f"{app.url}/steer",
            headers=ALICE,
            json={"sessionId": "s", "text": STEER_TEXT},
            timeout=TIMEOUT,
        )
        assert r.status_code == 200, r.text
        reply = r.json()
        assert reply["sessionId"] == "s" and reply["steered"] is True
        assert reply["submissionId"] == submission_id
        seen += take_until(lines, is_turn_end)
    assert seen[-1]["data"]["outcome"] == "completed"
    (recorded,) = [line for line in seen if line["cursor"] == reply["cursor"]]
    assert recorded["type"] == "steer.recorded" and recorded["data"]["text"] == STEER_TEXT

    history = HTTP.get(f"{app.url}/sessions/s/history", headers=ALICE, timeout=TIMEOUT)
    messages = history.json()["messages"]
    roles = [m["role"] for m in messages]
    (at,) = [i for i, m in enumerate(messages) if m["text"] == STEER_TEXT]
    assert roles[at] == "user"
    # Delivered at the step boundary after read_state: after its result, before the next
    # assistant message, and within the same turn (one submission, no second turn_start).
    assert roles[:at] == ["user", "assistant", "tool"]
    assert messages[at - 1]["toolName"] == "read_state"
    assert roles[at + 1] == "assistant"
    assert [line["type"] for line in seen].count("turn_start") == 1
    assert read_store(app, lambda v: len(v.submissions(ALICES_S))) == 1


def test_steering_beyond_what_a_turn_can_hold_is_refused_with_429(served):
    """16 steering messages may wait for the turn's next model call; the 17th is refused,
    clearly, and every one that was accepted is delivered."""
    from fxdurable.core.journal import MAX_PENDING_STEERING

    app = served(scenario="abort")  # read_state takes 1 s: time to steer many times
    app.start()
    with chat_stream(app, STORY) as running:
        lines = parsed(running)
        seen = take_until(lines, tool_started("read_state"))
        answers = [
            HTTP.post(
                f"{app.url}/steer",
                headers=ALICE,
                json={"sessionId": "s", "text": f"note {n}"},
                timeout=TIMEOUT,
            )
            for n in range(MAX_PENDING_STEERING + 1)
        ]
        seen += take_until(lines, is_turn_end)
    assert [a.status_code for a in answers] == [200] * MAX_PENDING_STEERING + [429]
    body = answers[-1].json()
    assert body["code"] == "steering_full" and body["error"] == "SteeringFullError"
    delivered = [line for line in seen if line["type"] == "steer.delivered"]
    assert sum(line["data"]["count"] for line in delivered) == MAX_PENDING_STEERING
    assert seen[-1]["data"]["outcome"] == "completed"


def test_steering_an_idle_session_starts_a_new_turn(served):
    app = served()
    app.start()
    first, _ = chat(app, STORY)
    r = HTTP.post(
        f"{app.url}/steer",
        headers=ALICE,
        json={"sessionId": "s", "text": FOLLOW_UP},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["steered"] is False
    assert reply["submissionId"] != first.headers["X-Fxd-Submission-Id"]

    with HTTP.stream(
        "GET",
        f"{app.url}/chat",
        params={"sessionId": "s", "cursor": str(reply["cursor"] - 1)},
        headers=ALICE,
        timeout=TIMEOUT,
    ) as stream:
        turn = take_until(parsed(stream), is_turn_end)
    assert turn[0]["type"] == "turn_start" and turn[0]["cursor"] == reply["cursor"]
    assert turn[0]["data"]["submission"] == reply["submissionId"]
    assert turn[-1]["data"]["outcome"] == "completed"
    assert turn[-1]["data"]["text"].startswith("Status: ")
    session = HTTP.get(f"{app.url}/sessions/s", headers=ALICE, timeout=TIMEOUT).json()
    assert [(s["prompt"], s["status"]) for s in session["submissions"]] == [
        (STORY, "completed"),
        (FOLLOW_UP, "completed"),
    ]


def test_abort_settles_the_running_turn_aborted(served):
    app = served(scenario="abort")  # read_state takes 1 s
    app.start()
    with chat_stream(app, STORY, key="to-abort") as running:
        submission_id = running.headers["X-Fxd-Submission-Id"]
        lines = parsed(running)
        take_until(lines, tool_started("read_state"))
        r = HTTP.post(f"{app.url}/abort", headers=ALICE, json={"sessionId": "s"}, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        assert r.json() == {"sessionId": "s", "aborted": [submission_id]}
        rest = take_until(lines, is_turn_end)
    assert rest[-1]["data"]["outcome"] == "aborted"
    assert rest[-1]["data"]["submission"] == submission_id
    assert "abort.requested" in [line["type"] for line in rest]

    # Nothing is left to abort; the charge and deploy never happened.
    again = HTTP.post(f"{app.url}/abort", headers=ALICE, json={"sessionId": "s"}, timeout=TIMEOUT)
    assert again.json() == {"sessionId": "s", "aborted": []}
    world = app.world_at_rest()
    assert_invariants(world, [request_id_for("alice", "to-abort")], sessions=1)
    assert world.effects == []
    assert [str(s.status) for s in world.submissions] == ["aborted"]
    # The session rests and takes the next message.
    _, turn = chat(app, FOLLOW_UP)
    assert turn[-1]["data"]["outcome"] == "completed"


# -- bad input -------------------------------------------------------------------------------

MAX_BODY = 1024


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    """One server for the bad-input cases (each admits nothing), with session ``s`` at rest."""
    app = ServedApp(
        tmp_path_factory.mktemp("bad-input"), extra_env={"FXD_HTTP_MAX_BODY_BYTES": str(MAX_BODY)}
    )
    app.start()
    try:
        assert chat(app, FOLLOW_UP)[1][-1]["data"]["outcome"] == "completed"
        yield app
    finally:
        app.kill()


def _chunks(data: bytes) -> Iterator[bytes]:
    # A generator body goes out chunked, with no Content-Length to refuse it by.
    for i in range(0, len(data), 100):
        yield data[i : i + 100]


OVERSIZED = json.dumps({"sessionId": "s", "prompt": "x" * 2 * MAX_BODY}).encode()
POST_ROUTES = ["/chat", "/steer", "/abort", "/wake"]
VALID_BODY = {
    "/chat": {"sessionId": "s", "prompt": "hello"},
    "/steer": {"sessionId": "s", "text": "hello"},
    "/abort": {"sessionId": "s"},
    "/wake": {"sessionId": "s"},
}
BAD_SESSION_IDS = ["", "-leading-dash", "../etc/passwd", "has space", "a" * 129, 42, None]


def _post_cases() -> list[Any]:
    cases: list[Any] = []
    for route in POST_ROUTES:
        valid = VALID_BODY[route]
        raw = [
            ("oversized", OVERSIZED, 413, "body_too_large"),
            ("oversized-chunked", _chunks, 413, "body_too_large"),
            ("malformed", b'{"sessionId": "s", ', 400, "malformed_json"),
            ("empty", b"", 400, "malformed_json"),
            ("not-utf8", b'{"sessionId": "\xff\xfe"}', 400, "malformed_json"),
            ("array", b'[{"sessionId": "s"}]', 422, "invalid_request"),
            ("string", b'"s"', 422, "invalid_request"),
            ("null", b"null", 422, "invalid_request"),
            ("unknown-field", {**valid, "sesionId": "s"}, 422, "invalid_request"),
            ("extra-field", {**valid, "stream": True}, 422, "invalid_request"),
        ]
        raw += [
            (f"session-id-{sid!r:.12}", {**valid, "sessionId": sid}, 422, "invalid_request")
            for sid in BAD_SESSION_IDS
            if sid is not None or route != "/chat"  # a chat without a session starts one
        ]
        if route == "/wake":
            # /wake names a session by its store key: "../etc/passwd" is one, of a principal
            # "../etc" (a key is never a path); a key without a public id is not.
            raw = [case for case in raw if case[0] != "session-id-'../etc/pass"]
            raw.append(("session-key-alice/", {"sessionId": "alice/"}, 422, "invalid_request"))
        cases += [pytest.param(route, *case, id=f"POST {route} {case[0]}") for case in raw]
    chat_cases = [
        ("empty-prompt", {"sessionId": "s", "prompt": ""}, 422, "invalid_request"),
        ("no-prompt", {"sessionId": "s"}, 422, "invalid_request"),
        ("prompt-number", {"sessionId": "s", "prompt": 7}, 422, "invalid_request"),
        ("when-busy-later", {"prompt": "x", "whenBusy": "later"}, 422, "invalid_request"),
        ("unknown-agent", {"prompt": "x", "agent": "nobody"}, 422, "unknown_agent"),
    ]
    cases += [pytest.param("/chat", *c, id=f"POST /chat {c[0]}") for c in chat_cases]
    steer_cases = [
        ("empty-text", {"sessionId": "s", "text": ""}, 422, "invalid_request"),
        ("no-session", {"text": "x"}, 422, "invalid_request"),
    ]
    cases += [pytest.param("/steer", *c, id=f"POST /steer {c[0]}") for c in steer_cases]
    return cases


def _send(app: ServedApp, route: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    if isinstance(body, dict):
        content = json.dumps(body).encode()
    elif callable(body):
        content = body(OVERSIZED)
    else:
        content = body
    if route == "/wake":
        signed = content if isinstance(content, bytes) else OVERSIZED
        headers = {SIGNATURE_HEADER: sign_wake(WAKE_SECRET, signed)}  # a wake is signed instead
    return HTTP.post(f"{app.url}{route}", headers=headers, content=content, timeout=TIMEOUT)


def _assert_nothing_changed(app: ServedApp) -> None:
    assert "Traceback" not in app.output()
    assert [s.id for s in read_store(app, lambda v: v.list_sessions())] == [ALICES_S]
    subs = read_store(app, lambda v: v.submissions(ALICES_S))
    assert [(s.prompt, str(s.status)) for s in subs] == [(FOLLOW_UP, "completed")]
    assert "steer.recorded" not in event_types(app)


@pytest.mark.parametrize(("route", "what", "body", "status", "code"), _post_cases())
def test_bad_post_bodies_get_a_json_error_and_change_nothing(
    limited, route, what, body, status, code
):
    r = _send(limited, route, body, ALICE)
    assert_error(r, status, code)
    _assert_nothing_changed(limited)


def _latest(app: ServedApp) -> int:
    return HTTP.get(f"{app.url}/sessions/s", headers=ALICE, timeout=TIMEOUT).json()["cursor"]


BAD_GETS = [
    ("cursor-abc", "/chat", {"sessionId": "s", "cursor": "abc"}, 400, "bad_cursor"),
    ("cursor-negative", "/chat", {"sessionId": "s", "cursor": "-1"}, 400, "bad_cursor"),
    ("cursor-fraction", "/chat", {"sessionId": "s", "cursor": "1.5"}, 400, "bad_cursor"),
    ("cursor-empty", "/chat", {"sessionId": "s", "cursor": ""}, 400, "bad_cursor"),
    ("cursor-huge", "/chat", {"sessionId": "s", "cursor": "9" * 40}, 400, "bad_cursor"),
    ("cursor-past-end", "/chat", {"sessionId": "s", "cursor": "PAST"}, 400, "bad_cursor"),
    ("no-session-id", "/chat", {"cursor": "0"}, 422, "invalid_request"),
    ("bad-session-id", "/chat", {"sessionId": "../s"}, 422, "invalid_request"),
    ("long-session-id", "/sessions/" + "a" * 129, {}, 422, "invalid_request"),
    ("dash-session-id", "/sessions/-s", {}, 422, "invalid_request"),
    ("dash-session-history", "/sessions/-s/history", {}, 422, "invalid_request"),
    ("missing-session", "/sessions/nope", {}, 404, "session_not_found"),
    ("unknown-route", "/nowhere", {}, 404, "not_found"),
]


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [pytest.param(*case[1:], id=f"GET {case[0]}") for case in BAD_GETS],
)
def test_bad_reads_get_a_json_error(limited, path, params, status, code):
    if params.get("cursor") == "PAST":
        params = {**params, "cursor": str(_latest(limited) + 1)}
    r = HTTP.get(f"{limited.url}{path}", params=params, headers=ALICE, timeout=TIMEOUT)
    assert_error(r, status, code)
    _assert_nothing_changed(limited)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("k" * 201, id="too-long"),
        pytest.param("", id="empty"),
        pytest.param("a\tb", id="tab"),
    ],
)
def test_bad_idempotency_keys_are_refused(limited, key):
    r, _ = chat(limited, FOLLOW_UP, key=key)
    assert_error(r, 400, "bad_idempotency_key")
    _assert_nothing_changed(limited)


def test_wrong_methods_and_long_texts_get_json_errors(served):
    app = served()
    app.start()
    r = HTTP.delete(f"{app.url}/chat", headers=ALICE, timeout=TIMEOUT)
    assert_error(r, 405, "method_not_allowed")
    # Under the default 256 KiB body limit, over the 100,000-character prompt limit.
    long = "x" * 100_001
    assert_error(chat(app, long)[0], 413, "prompt_too_long")
    assert read_store(app, lambda v: v.list_sessions()) == []
    assert chat(app, FOLLOW_UP)[0].status_code == 200
    r = HTTP.post(
        f"{app.url}/steer", headers=ALICE, json={"sessionId": "s", "text": long}, timeout=TIMEOUT
    )
    assert_error(r, 413, "prompt_too_long")
    assert "steer.recorded" not in event_types(app)
    assert read_store(app, lambda v: len(v.submissions(ALICES_S))) == 1
    assert "Traceback" not in app.output()


def test_the_server_log_has_no_traceback_after_bad_input(limited):
    # The per-case checks above look after each request; this one also runs alone.
    for route in POST_ROUTES:
        assert _send(limited, route, b"[", ALICE).status_code in (400, 422)
        assert _send(limited, route, OVERSIZED, ALICE).status_code == 413
    log = limited.output()
    for route in POST_ROUTES:  # the log is the server's own: it shows these very requests
        assert f'"POST {route} HTTP/1.1" 413' in log, log[-2000:]
    assert "Traceback" not in log
