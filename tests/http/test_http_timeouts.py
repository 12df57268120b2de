"""A request body has a deadline: a client that sends its headers and then stalls, or trickles
its body a byte at a time, gets ``408 body_timeout`` and a closed connection once
``FXD_HTTP_BODY_TIMEOUT_S`` have passed, on every route that reads a body; the server goes on
serving everyone else."""

from __future__ import annotations

import json
import select
import socket
import time

import httpx
import pytest
from http_server import ALICE_TOKEN, WAKE_SECRET, ServedApp
from raw_http import Answer, closed_by_server, connected, read_answer, request_head

from fxdurable.http.signing import SIGNATURE_HEADER, sign_wake
from tests.kit.story import STORY
from tests.kit.world import read_store

BODY_TIMEOUT_S = 0.5
# How long the client waits for the answer: far past BODY_TIMEOUT_S, so only a server that
# never answers fails (without the deadline it waits for the rest of the body forever).
CLIENT_TIMEOUT_S = 20.0
BODIES = {
    "/chat": {"sessionId": "s", "prompt": STORY},
    "/steer": {"sessionId": "s", "text": "and then?"},
    "/abort": {"sessionId": "s"},
    "/wake": {"sessionId": "s"},
}


@pytest.fixture
def app(served) -> ServedApp:
    app = served(extra_env={"FXD_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S)})
    app.start()
    return app


def _head(route: str, body: bytes) -> bytes:
    headers = [
        (b"Authorization", f"Bearer {ALICE_TOKEN}".encode()),
        (SIGNATURE_HEADER.encode(), sign_wake(WAKE_SECRET, body).encode()),
        (b"Content-Type", b"application/json"),
    ]
    return request_head("POST", route, headers, content_length=len(body))


def _assert_timed_out(answer: Answer, sock: socket.socket, what: str) -> None:
    assert answer.status == 408, (what, answer)
    error = json.loads(answer.body)
    assert error["code"] == "body_timeout" and error["message"], (what, error)
    assert answer.headers.get("connection") == "close", (what, answer.headers)
    assert closed_by_server(sock), what


def _stall(app: ServedApp, route: str) -> None:
    """Headers and half the body, then nothing."""
    body = json.dumps(BODIES[route]).encode()
    with connected(app.port, timeout_s=CLIENT_TIMEOUT_S) as sock:
        sock.sendall(_head(route, body) + body[: len(body) // 2])
        _assert_timed_out(read_answer(sock, "POST"), sock, f"stalled {route}")


def _trickle(app: ServedApp, route: str) -> None:
    """Headers, then the body a byte every 50 ms: each byte is prompt, the whole is not."""
    body = json.dumps(BODIES[route]).encode() + b" " * 1000  # 50 s of bytes at this pace
    with connected(app.port, timeout_s=CLIENT_TIMEOUT_S) as sock:
        sock.sendall(_head(route, body))
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        for byte in body:
            answered, _, _ = select.select([sock], [], [], 0.05)
            if answered or time.monotonic() > deadline:
                break
            sock.sendall(bytes([byte]))
        _assert_timed_out(read_answer(sock, "POST"), sock, f"trickled {route}")


def _healthy(app: ServedApp) -> None:
    assert httpx.get(f"{app.url}/healthz", timeout=CLIENT_TIMEOUT_S).status_code == 200
    headers = {"Authorization": f"Bearer {ALICE_TOKEN}"}
    with httpx.stream(
        "POST",
        f"{app.url}/chat",
        headers=headers,
        json=BODIES["/chat"],
        timeout=CLIENT_TIMEOUT_S,
    ) as r:
        assert r.status_code == 200, r.read()
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1]["type"] == "turn_end" and lines[-1]["data"]["outcome"] == "completed"


def test_a_body_that_stalls_half_way_gets_408_and_the_server_stays_healthy(app):
    for route in BODIES:
        _stall(app, route)
    assert read_store(app.store_url, lambda v: v.list_sessions()) == []  # none got through
    _healthy(app)
    for sign in ("Traceback", "unexpected error"):
        assert sign not in app.output(), app.output()


def test_a_body_trickled_a_byte_at_a_time_gets_408_all_the_same(app):
    for route in ("/chat", "/wake"):
        _trickle(app, route)
    _healthy(app)
    assert "Traceback" not in app.output(), app.output()
