"""Against a server in receipt mode (AWS Lambda's: ``POST /chat`` answers 202 with a receipt
and ``GET /chat`` long-polls from a cursor, ``FXD_HTTP_MODE=receipt``), the console shows the
turn the same way: the call running, then the turn completed, each line once."""

from __future__ import annotations

from collections.abc import Callable

from console_pages import event_cursors, open_gate_and_finish, start_gated_turn
from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots

RECEIPT_MODE = {"FXD_HTTP_MODE": "receipt", "FXD_HTTP_LONG_POLL_S": "2"}


def test_a_turn_streams_in_receipt_mode(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve(env=RECEIPT_MODE)
    receipts = []
    page.on("response", lambda r: r.url.endswith("/chat") and receipts.append(r.status))
    start_gated_turn(page, server, "receipt-1", "r1")
    assert receipts == [202]  # the console took a receipt, not a stream
    # No progress text here: a long poll carries events only (the stream's progress lines
    # are polled state), so the view shows the call running without it.
    expect(page.get_by_test_id("connection")).to_have_text("live")
    shots.take("running")

    open_gate_and_finish(page, server, "r1", "Done: gate r1 opened.")
    shots.take("completed")
    cursors = event_cursors(page)
    assert len(cursors) == len(set(cursors)), cursors
