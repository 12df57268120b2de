"""``DELETE /sessions/{id}`` against a real ``fxdurable serve``: owner-checked like every
session route (another caller's session is a 404 and stays), then the session is gone, and
the CLI's ``fxdurable erase`` on the same store says a second erase has nothing to erase."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from http_server import ALICE, BOB

from fxdurable.http.scoping import session_key
from tests.kit.story import STORY
from tests.kit.world import read_store

HTTP = httpx.Client(timeout=httpx.Timeout(30.0))


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    HTTP.close()


def test_delete_erases_the_callers_session_only(served):
    app = served()
    app.start()
    body = {"sessionId": "s", "prompt": STORY}
    with HTTP.stream("POST", f"{app.url}/chat", headers=ALICE, json=body) as r:
        assert r.status_code == 200
        list(r.iter_lines())
    assert HTTP.delete(f"{app.url}/sessions/s", headers=BOB).status_code == 404
    assert HTTP.get(f"{app.url}/sessions/s", headers=ALICE).status_code == 200
    erased = HTTP.delete(f"{app.url}/sessions/s", headers=ALICE)
    assert erased.status_code == 200, erased.text
    reply = erased.json()
    assert reply["sessionId"] == "s" and reply["records"] > 5, reply
    assert HTTP.get(f"{app.url}/sessions/s", headers=ALICE).status_code == 404
    assert HTTP.delete(f"{app.url}/sessions/s", headers=ALICE).status_code == 404
    key = session_key("alice", "s")
    assert read_store(app.store_url, lambda v: v.get_session(key)) is None
    again = subprocess.run(
        [sys.executable, "-m", "fxdurable", "erase", key, "--store", app.store_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and f"no session {key!r}" in again.stderr, again.stderr
