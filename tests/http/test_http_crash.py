"""The HTTP crash suite: a real ``fxdurable serve`` SIGKILLed at named points, as a client sees it.

Each test kills the server (at a crash point, or from outside), restarts it on the same store,
and goes on as a client would: it retries its POST with the same ``Idempotency-Key`` or
reconnects with ``GET /chat`` from the last cursor it read. The client's lines, pieced
together, must be the session's journal events without a gap or a duplicate from
``turn_start`` to ``turn_end``; then the crash suite's invariants are checked from the
database and the outside world's logs, and the session must complete a follow-up turn.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from http_lines import line_of, lines_of
from http_server import ALICE, ServedApp

from fxdurable.http.lines import line_for
from fxdurable.http.route_base import request_id_for
from fxdurable.http.scoping import session_key
from tests.kit.story import DONE_TEXT, FOLLOW_UP, STORY, UNKNOWN_MARK
from tests.kit.world import World, assert_invariants, assert_model_requests, read_world

pytestmark = pytest.mark.crash

SESSION = "s"
IDLE_TIMEOUT_S = 1.5  # a reconnect ends with ``stream_end`` after this long without a line
CLIENT_DEADLINE_S = 30.0
# Stream lines that are not journal events (a progress line repeats the last event's cursor).
MARKERS = ("keepalive", "stream_end", "progress")


@dataclass
class Read:
    """What one HTTP request gave the client before it ended, cleanly or not."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    lines: list[dict[str, Any]] = field(default_factory=list)
    error: Exception | None = None  # the broken connection, if it broke

    @property
    def events(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["type"] not in MARKERS]


def serve(served: Any, **kwargs: Any) -> ServedApp:
    extra_env = {"FXD_HTTP_IDLE_TIMEOUT_S": str(IDLE_TIMEOUT_S)}
    return served(extra_env=extra_env, **kwargs)


def rid(key: str) -> str:
    request_id = request_id_for("alice", key)
    assert request_id is not None
    return request_id


def ends_turn(line: dict[str, Any], submission: str | None) -> bool:
    return line["type"] == "turn_end" and (
        submission is None or line["data"].get("submission") == submission
    )


def read_stream(response: httpx.Response, read: Read, submission: str | None = None) -> None:
    """Read lines into ``read`` until the stream ends, breaks, or ends ``submission``'s turn."""
    read.status = response.status_code
    read.headers = dict(response.headers)
    try:
        for raw in response.iter_lines():
            if raw:
                read.lines.append(line_of(raw))
                if ends_turn(read.lines[-1], submission):
                    return
    except httpx.TransportError as exc:  # the server died under the stream
        read.error = exc


def post_chat(app: ServedApp, prompt: str, key: str | None) -> Read:
    """POST /chat for session ``s`` and read its stream until it ends or breaks."""
    read = Read()
    headers = dict(ALICE)
    if key is not None:
        headers["Idempotency-Key"] = key
    try:
        with httpx.stream(
            "POST",
            f"{app.url}/chat",
            headers=headers,
            json={"sessionId": SESSION, "prompt": prompt},
            timeout=CLIENT_DEADLINE_S,
        ) as response:
            read_stream(response, read)
    except httpx.TransportError as exc:  # died before it answered
        read.error = exc
    return read


def reconnect(app: ServedApp, cursor: int, submission: str) -> list[dict[str, Any]]:
    """GET /chat from ``cursor`` until ``submission``'s turn_end, reconnecting from the last
    cursor whenever a stream ends idle: every event line after ``cursor``, in order."""
    lines: list[dict[str, Any]] = []
    deadline = time.monotonic() + CLIENT_DEADLINE_S
    while time.monotonic() < deadline:
        read = Read()
        with httpx.stream(
            "GET",
            f"{app.url}/chat",
            params={"sessionId": SESSION, "cursor": cursor},
            headers=ALICE,
            timeout=CLIENT_DEADLINE_S,
        ) as response:
            assert response.status_code == 200, response.read()
            read_stream(response, read, submission)
        assert read.error is None, f"the reconnected stream broke: {read.error!r}"
        lines += read.events
        if lines and ends_turn(lines[-1], submission):
            return lines
        end = read.lines[-1]
        assert end["type"] == "stream_end", f"a stream ended without stream_end: {read.lines}"
        assert end["data"]["reason"] == "idle" and end["cursor"] == (
            lines[-1]["cursor"] if lines else cursor
        ), end
        cursor = end["cursor"]
    raise AssertionError(f"no turn_end for {submission} in {CLIENT_DEADLINE_S}s: {lines}")


def assert_killed_at(app: ServedApp, spec: str) -> None:
    code = app.wait_exit()
    assert code == -signal.SIGKILL, f"exit {code}, not SIGKILL at {spec}:\n{app.output()}"
    assert f"crash injected at {spec}" in app.output(), app.output()


def assert_whole_turn(lines: list[dict[str, Any]], world: World, submission: str) -> None:
    """``lines`` are the turn's events exactly as the journal has them, from its turn_start
    to its turn_end: consecutive cursors, no gap, no duplicate."""
    assert lines, "no lines"
    cursors = [line["cursor"] for line in lines]
    assert cursors == list(range(cursors[0], cursors[0] + len(cursors))), cursors
    assert lines[0]["type"] == "turn_start" and lines[0]["turnId"] == submission, lines[0]
    assert ends_turn(lines[-1], submission), lines[-1]
    # The journal keys the session by alice's namespace; her lines name it as she does.
    assert {e.session_id for e in world.events} == {session_key("alice", SESSION)}
    journal = [
        json.loads(json.dumps({**line_for(e), "sessionId": SESSION}))
        for e in world.events
        if cursors[0] <= e.seq <= cursors[-1]
    ]
    assert lines == journal


def assert_idles_out(app: ServedApp, cursor: int) -> None:
    """A reconnect past the last line stays open until the idle timeout, then says so."""
    started = time.monotonic()
    response = httpx.get(
        f"{app.url}/chat",
        params={"sessionId": SESSION, "cursor": cursor},
        headers=ALICE,
        timeout=CLIENT_DEADLINE_S,
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    lines = lines_of(response.text.splitlines())
    assert [(line["type"], line["cursor"], line["data"]) for line in lines] == [
        ("stream_end", cursor, {"reason": "idle"})
    ], lines
    assert IDLE_TIMEOUT_S <= elapsed < IDLE_TIMEOUT_S + 5, elapsed


def assert_completed(read: Read) -> None:
    assert read.error is None, f"the stream broke: {read.error!r}"
    assert read.status == 200, read.lines
    assert read.lines[0]["type"] == "turn_start", read.lines[0]
    assert read.lines[-1]["type"] == "turn_end", read.lines[-1]
    assert read.lines[-1]["data"]["outcome"] == "completed", read.lines[-1]


def follow_up(app: ServedApp, request_ids: list[str]) -> World:
    """The session accepts a next message over HTTP and completes it; invariants again."""
    read = post_chat(app, FOLLOW_UP, "next")
    assert_completed(read)
    world = app.world_at_rest()
    assert_invariants(world, [*request_ids, rid("next")], sessions=1)
    nxt = world.submission(rid("next"))
    assert nxt.status == "completed" and (nxt.result_text or "").startswith("Status: "), nxt
    assert_whole_turn(read.events, world, nxt.id)
    return world


def test_a_retried_post_after_a_crash_past_admission_gets_the_same_submission(served):
    app = serve(served)
    app.start(crash_at="submission.after-admit")
    first = post_chat(app, STORY, "k1")
    assert_killed_at(app, "submission.after-admit")
    assert first.error is not None and not first.lines, first
    # The admission was committed before the crash: the work is accepted, though unanswered.
    (admitted,) = read_world(app.store_url, app.workdir).submissions
    assert admitted.request_id == rid("k1") and admitted.status == "queued", admitted

    app.start()
    retry = post_chat(app, STORY, "k1")
    assert_completed(retry)
    assert retry.headers["x-fxd-submission-id"] == admitted.id
    assert retry.lines[0]["cursor"] == admitted.cursor
    # Retried once more after the end: the same turn again, not new work.
    # Progress lines are polled state, not history: the live stream may have caught one
    # (the deploy reports progress), a replay never has any. The events must be identical.
    assert post_chat(app, STORY, "k1").events == retry.events
    assert_idles_out(app, retry.lines[-1]["cursor"])
    world = app.world_at_rest()
    assert_invariants(world, [rid("k1")], sessions=1)  # exactly one submission for the key
    assert_model_requests(world)
    assert_whole_turn(retry.events, world, admitted.id)
    assert world.submission(rid("k1")).result_text == retry.lines[-1]["data"]["text"] == DONE_TEXT
    assert len(world.effects_of("deploy")) == len(world.effects_of("charge")) == 1

    follow_up(app, [rid("k1")])


@pytest.mark.parametrize(
    ("tool", "scenario"),
    # The scenario makes a tool before the crash slow, so the client has read lines by then.
    [("deploy", "abort-deploy"), ("charge", "abort")],
)
def test_a_stream_cut_by_a_crash_after_a_tool_ran_resumes_from_its_cursor(served, tool, scenario):
    app = serve(served, scenario=scenario)
    spec = f"tool.after-execute:{tool}"
    app.start(crash_at=spec)
    first = post_chat(app, STORY, "k1")
    assert_killed_at(app, spec)
    assert first.status == 200 and first.error is not None, first
    assert first.events and first.events[0]["type"] == "turn_start", first.lines
    assert not [line for line in first.lines if line["type"] == "turn_end"], first.lines
    submission = first.headers["x-fxd-submission-id"]

    app.start()
    rest = reconnect(app, first.events[-1]["cursor"], submission)
    world = app.world_at_rest()
    assert_invariants(world, [rid("k1")], sessions=1)
    assert_model_requests(world)  # no recorded step asked the model again
    lines = first.events + rest
    assert_whole_turn(lines, world, submission)
    assert lines[-1]["data"]["outcome"] == "completed"
    sub = world.submission(rid("k1"))
    assert lines[-1]["data"]["text"] == sub.result_text  # the client reads the answer
    task = world.task(tool, rid("k1"))
    if tool == "deploy":
        # Unsafe: never replayed; the model was told, inspected, and did not deploy again.
        assert world.calls_of("deploy") == [(task.execution_id, 1)], world.calls
        assert world.effects_of("deploy") == [task.execution_id]
        assert task.status == "outcome_unknown", task
        assert [
            line["data"]["task"] for line in lines if line["type"] == "tool.outcome_unknown"
        ] == [task.id]
        assert UNKNOWN_MARK in (task.result or ""), task
        assert world.task("check_deploy", rid("k1")).status == "completed"
        assert "1 deploy(s) on record" in (sub.result_text or ""), sub.result_text
        assert "I will not deploy again" in (sub.result_text or ""), sub.result_text
    else:
        # Idempotent: re-executed with the same execution id, which the ledger dedupes on.
        assert world.calls_of("charge") == [(task.execution_id, 1), (task.execution_id, 2)]
        assert world.ledger == [task.execution_id]
        assert task.status == "completed", task
        assert sub.result_text == DONE_TEXT
        assert len(world.effects_of("deploy")) == 1

    follow_up(app, [rid("k1")])


def test_steering_recorded_just_before_a_crash_reaches_the_model_once(served):
    app = serve(served, scenario="abort")  # read_state takes 1 s: the turn is surely running
    spec = "steer.after-record"
    app.start(crash_at=spec)
    text = "Also mention the ticket FXD-7 in your answer."
    first = Read()
    steer_error: Exception | None = None
    with (
        httpx.Client(headers=ALICE, timeout=CLIENT_DEADLINE_S) as client,
        client.stream(
            "POST",
            f"{app.url}/chat",
            headers={"Idempotency-Key": "k1"},
            json={"sessionId": SESSION, "prompt": STORY},
        ) as response,
    ):
        lines = response.iter_lines()
        for raw in lines:
            if raw:
                first.lines.append(line_of(raw))
                if first.lines[-1]["type"] == "tool.started":
                    break
        assert first.lines[-1]["data"].get("tool") == "read_state", first.lines
        try:
            client.post(f"{app.url}/steer", json={"sessionId": SESSION, "text": text})
        except httpx.TransportError as exc:  # the server died before it answered
            steer_error = exc
        try:
            for raw in lines:
                if raw:
                    first.lines.append(line_of(raw))
        except httpx.TransportError as exc:
            first.error = exc
    assert_killed_at(app, spec)
    assert steer_error is not None, "the steer was answered, so the crash point did not fire"
    assert first.error is not None, first.lines
    submission = first.events[0]["turnId"]

    app.start()
    lines = first.events + reconnect(app, first.events[-1]["cursor"], submission)
    world = app.world_at_rest()
    assert_invariants(world, [rid("k1")], sessions=1)
    assert_whole_turn(lines, world, submission)
    assert lines[-1]["data"]["outcome"] == "completed"
    # The client never heard back from its steer; the stream tells it the steer landed.
    steering = [(line["type"], line["data"]) for line in lines if line["type"].startswith("steer.")]
    assert [kind for kind, _ in steering] == ["steer.recorded", "steer.delivered"], steering
    assert steering[0][1]["text"] == text and steering[1][1]["count"] == 1, steering
    history = httpx.get(f"{app.url}/sessions/{SESSION}/history", headers=ALICE).json()
    users = [m["text"] for m in history["messages"] if m["role"] == "user"]
    assert users == [STORY, text], users
    session = httpx.get(f"{app.url}/sessions/{SESSION}", headers=ALICE).json()
    assert session["steeringPending"] == 0, session

    follow_up(app, [rid("k1")])


@pytest.mark.parametrize("seed", [2, 3, 9, 5])
def test_a_stream_cut_by_a_sigkill_at_a_random_moment_resumes_from_its_cursor(served, seed):
    # Every tool takes 30 ms here, so a turn's dozen lines come over about 150 ms and the
    # client's k-th line is a moment in the middle of the turn: a model call, a tool, a commit.
    rng = random.Random(seed)
    kill_after, jitter_s = rng.randrange(1, 12), rng.uniform(0.0, 0.04)
    moment = f"seed {seed}: SIGKILL {jitter_s * 1000:.0f} ms after line {kill_after}"
    app = serve(served, scenario="continuation")
    app.start()
    first = Read()
    with httpx.stream(
        "POST",
        f"{app.url}/chat",
        headers={**ALICE, "Idempotency-Key": "k1"},
        json={"sessionId": SESSION, "prompt": STORY},
        timeout=CLIENT_DEADLINE_S,
    ) as response:
        first.headers = dict(response.headers)
        try:
            for raw in response.iter_lines():
                if raw:
                    first.lines.append(line_of(raw))
                if len(first.lines) == kill_after and app.proc and app.proc.poll() is None:
                    time.sleep(jitter_s)
                    app.kill()
        except httpx.TransportError as exc:
            first.error = exc
    assert app.wait_exit() == -signal.SIGKILL, moment
    # The client reads what reached it before the connection broke: perhaps the whole turn.
    assert len(first.lines) >= kill_after, (moment, first.lines)
    submission = first.headers["x-fxd-submission-id"]
    finished = ends_turn(first.events[-1], submission)
    assert finished or first.error is not None, (moment, first.lines)

    app.start()
    lines = first.events
    if not finished:
        lines += reconnect(app, first.events[-1]["cursor"], submission)
    world = app.world_at_rest()
    assert_invariants(world, [rid("k1")], sessions=1)
    assert_whole_turn(lines, world, submission)
    assert lines[-1]["data"]["outcome"] == "completed", moment
    # At most one model request was cut off by the kill and asked again; none other twice.
    asked = Counter((prompt, round_) for prompt, round_, _pid in world.model_requests)
    again = [request for request, n in asked.items() if n > 1]
    assert len(again) <= 1, (moment, world.model_requests)
    assert_model_requests(world, again=again)
    deploy = world.task("deploy", rid("k1"))
    sub = world.submission(rid("k1"))
    if deploy.status == "outcome_unknown":
        assert "I will not deploy again" in (sub.result_text or ""), (moment, sub.result_text)
    else:
        assert deploy.status == "completed" and sub.result_text == DONE_TEXT, (moment, deploy)
        assert world.effects_of("deploy") == [deploy.execution_id], moment
    assert world.effects_of("charge") == [world.task("charge", rid("k1")).execution_id], moment

    follow_up(app, [rid("k1")])
