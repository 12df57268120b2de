"""Reconnecting to a chat stream over a real socket: ``GET /chat`` from a cursor shows every
later line exactly once, replays from the start with cursor 0, stays open across turns, and
ends with a ``stream_end`` line once the session has been quiet for the idle timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from http_lines import Line, is_turn_end, parsed, take_until
from http_server import ALICE, ServedApp

from fxdurable.backends import open_store
from fxdurable.http.route_base import request_id_for
from tests.kit.story import FOLLOW_UP, STORY
from tests.kit.world import assert_invariants

TIMEOUT = httpx.Timeout(30.0)
# One client for the module: a new one per call costs ~80 ms (it builds an SSL context).
HTTP = httpx.Client(timeout=TIMEOUT)
IDLE_S = 1.0


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


def chat(
    app: ServedApp, prompt: str, *, key: str | None = None
) -> tuple[httpx.Response, list[Line]]:
    headers = {**ALICE, **({"Idempotency-Key": key} if key else {})}
    body = {"sessionId": "s", "prompt": prompt}
    with HTTP.stream("POST", f"{app.url}/chat", headers=headers, json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200, r.read()
        return r, list(parsed(r))


def reconnect(app: ServedApp, cursor: int | str) -> httpx.Response:
    """An open ``GET /chat`` stream (use as a context manager)."""
    return HTTP.stream(
        "GET",
        f"{app.url}/chat",
        params={"sessionId": "s", "cursor": str(cursor)},
        headers=ALICE,
        timeout=TIMEOUT,
    )


def submission_status(app: ServedApp, submission_id: str) -> str:
    store = open_store(app.store_url)
    try:
        sub = store.read(lambda v: v.get_submission(submission_id))
    finally:
        store.close()
    assert sub is not None
    return str(sub.status)


def assert_consecutive(lines: list[Line]) -> None:
    cursors = [line["cursor"] for line in lines]
    assert cursors == list(range(cursors[0], cursors[0] + len(cursors))), cursors


def test_a_client_that_reconnects_from_its_cursor_misses_no_line_and_sees_none_twice(served):
    # "abort": read_state takes 1 s, so the client drops out and comes back mid-turn.
    app = served(scenario="abort", extra_env={"FXD_HTTP_IDLE_TIMEOUT_S": str(IDLE_S)})
    app.start()
    headers = {**ALICE, "Idempotency-Key": "story-1"}
    body = {"sessionId": "s", "prompt": STORY}
    with HTTP.stream("POST", f"{app.url}/chat", headers=headers, json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200
        submission_id = r.headers["X-Fxd-Submission-Id"]
        lines = parsed(r)
        first = [next(lines) for _ in range(4)]
    # The client hung up; the turn goes on without it.
    assert first[0]["type"] == "turn_start"
    assert first[0]["data"]["submission"] == submission_id
    assert submission_status(app, submission_id) == "running", "reconnect mid-turn, not after"

    last_seen = first[-1]["cursor"]
    with reconnect(app, last_seen) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        rest = list(parsed(r))  # through the turn's end, then idle, then stream_end
    *rest, end = rest
    assert end["type"] == "stream_end" and end["data"] == {"reason": "idle"}
    assert end["cursor"] == rest[-1]["cursor"], "reconnecting from stream_end's cursor is exact"
    assert rest[0]["cursor"] == last_seen + 1
    assert [line["type"] for line in rest].count("turn_end") == 1
    assert rest[-1]["type"] == "turn_end" and rest[-1]["data"]["outcome"] == "completed"

    union = first + rest
    assert_consecutive(union)
    assert len({line["cursor"] for line in union}) == len(union)

    # A full read of the same turn (the idempotent retry streams it again) gives the same lines.
    retry, full = chat(app, STORY, key="story-1")
    assert retry.headers["X-Fxd-Submission-Id"] == submission_id
    assert union == full
    world = app.world_at_rest()
    assert_invariants(world, [request_id_for("alice", "story-1")], sessions=1)


def test_cursor_zero_replays_the_session_from_its_first_line(served):
    app = served(extra_env={"FXD_HTTP_IDLE_TIMEOUT_S": str(IDLE_S)})
    app.start()
    _, turn = chat(app, STORY)
    assert turn[-1]["type"] == "turn_end"

    with reconnect(app, 0) as r:
        assert r.status_code == 200
        replay = list(parsed(r))
    *replay, end = replay
    assert replay[0]["cursor"] == 1 and replay[0]["type"] == "session.created"
    assert_consecutive(replay)
    start = [line["type"] for line in replay].index("turn_start")
    assert replay[start:] == turn
    assert end["type"] == "stream_end" and end["data"]["reason"] == "idle"
    assert end["cursor"] == turn[-1]["cursor"]


def test_an_open_stream_shows_every_turn_submitted_after_it_opened(served):
    app = served(extra_env={"FXD_HTTP_IDLE_TIMEOUT_S": "5"})
    app.start()
    _, first = chat(app, STORY)
    cursor = first[-1]["cursor"]

    with reconnect(app, cursor) as r:
        assert r.status_code == 200  # the headers are in: the stream is open and waiting
        lines = parsed(r)
        _, second = chat(app, FOLLOW_UP, key="next-1")
        seen_second = take_until(lines, is_turn_end)
        # The stream outlives a turn's end: a turn submitted later shows up on it too.
        _, third = chat(app, FOLLOW_UP, key="next-2")
        seen_third = take_until(lines, is_turn_end)

    assert seen_second == second and seen_second[0]["cursor"] == cursor + 1
    assert seen_third == third and seen_third[0]["cursor"] == second[-1]["cursor"] + 1
    assert second[0]["data"]["submission"] != third[0]["data"]["submission"]
    for turn in (second, third):
        assert turn[0]["type"] == "turn_start"
        assert turn[-1]["data"]["outcome"] == "completed"
        assert turn[-1]["data"]["text"].startswith("Status: ")


def test_a_stream_on_a_quiet_session_ends_with_stream_end_idle(served):
    app = served(extra_env={"FXD_HTTP_IDLE_TIMEOUT_S": str(IDLE_S)})
    app.start()
    _, turn = chat(app, STORY)
    latest = turn[-1]["cursor"]

    started = time.monotonic()
    with reconnect(app, latest) as r:
        assert r.status_code == 200
        quiet = list(parsed(r))
    waited = time.monotonic() - started
    assert quiet == [
        {"cursor": latest, "type": "stream_end", "sessionId": "s", "data": {"reason": "idle"}}
    ]
    assert IDLE_S * 0.9 <= waited < IDLE_S + 5, waited

    # From two lines back: those two lines, then the same end.
    with reconnect(app, latest - 2) as r:
        tail = list(parsed(r))
    assert tail[:2] == turn[-2:]
    assert tail[2:] == quiet
