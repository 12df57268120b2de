"""A store that cannot serve a request is an answer the client can act on, not a 500: a lock
held past the busy timeout is ``503 store_unavailable`` with ``Retry-After`` (nothing was
written, so the same request may be sent again), and the server serves again once the store
does."""

from __future__ import annotations

import sqlite3

import httpx
from http_lines import parsed
from http_server import ALICE

CHAT = {"sessionId": "s", "prompt": "Read the state, charge order 42 and deploy release 2.0."}


def test_a_locked_store_is_503_and_the_same_request_succeeds_later(served, tmp_path):
    db = tmp_path / "locked.db"
    app = served(store_url=f"sqlite:///{db.resolve()}?busy_timeout_ms=100")
    app.start()
    key = {**ALICE, "Idempotency-Key": "store-fault-1"}
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        answer = httpx.post(f"{app.url}/chat", headers=key, json=CHAT, timeout=30)
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "store_unavailable"
        assert answer.headers["retry-after"] == "1"
        assert "Traceback" not in app.log.read_text()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with httpx.stream("POST", f"{app.url}/chat", headers=key, json=CHAT, timeout=30) as response:
        assert response.status_code == 200
        lines = list(parsed(response))
    assert lines[-1]["type"] == "turn_end" and lines[-1]["data"]["outcome"] == "completed"
    # Exactly one submission: the refused attempt wrote nothing.
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM submissions").fetchone() == (1,)
