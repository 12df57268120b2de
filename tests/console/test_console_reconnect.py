"""The network drops while the page streams a turn: the server is SIGKILLed and started
again on the same port and store. The view says "reconnecting", then "live" again, and the
turn streams on to its end; the log holds every line the server has, each once."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
from console_pages import event_cursors, open_gate_and_finish, start_gated_turn
from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots

NOT_EVENTS = {"progress", "keepalive", "stream_end"}  # state and stream markers, not lines


def journal_cursors(server: ConsoleServer, session_id: str) -> list[int]:
    """The cursors of the session's lines as a fresh ``GET /chat`` from 0 replays them, up to
    its first turn's end."""
    cursors = []
    params = {"sessionId": session_id, "cursor": 0}
    with httpx.stream("GET", f"{server.url}/chat", params=params, timeout=30) as reply:
        for raw in reply.iter_lines():
            line = json.loads(raw) if raw else None
            if line is None or line["type"] in NOT_EVENTS:
                continue
            cursors.append(line["cursor"])
            if line["type"] == "turn_end":
                return cursors
    raise AssertionError(f"the replay ended without a turn_end: {cursors}")


def test_the_stream_resumes_after_the_server_restarts_without_gap_or_duplicate(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve()
    start_gated_turn(page, server, "drop-1", "d1")
    connection = page.get_by_test_id("connection")
    expect(connection).to_have_text("live")
    shots.take("live-before-drop")

    server.kill()
    expect(connection).to_have_text("reconnecting")
    shots.take("reconnecting")
    server.start()
    expect(connection).to_have_text("live")
    expect(page.get_by_test_id("interruption").first).to_be_visible()
    shots.take("live-again")

    open_gate_and_finish(page, server, "d1", "Done: gate d1 opened.")
    shots.take("completed-after-restart")

    shown = event_cursors(page)
    assert len(shown) == len(set(shown)), f"a line shown twice: {shown}"
    missing = set(journal_cursors(server, "drop-1")) - set(shown)
    assert not missing, f"lines never shown: {sorted(missing)} (shown {shown})"
