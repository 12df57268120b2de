"""The console's pages pass axe-core (vendored: tests/console/vendor/) with no serious or
critical violation, in the light and the dark colour scheme, at 1280 and 360 px: the sessions
list, a session with a permission prompt open and a completed tool call, and the trace."""

from __future__ import annotations

import pytest
from axe_check import assert_accessible
from console_pages import open_session, send, turn_end
from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 360])
def test_the_pages_have_no_serious_axe_violation(
    page: Page, dev_server: ConsoleServer, shots: Shots, scheme: str, width: int
) -> None:
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(dev_server.console_url)
    expect(page.get_by_test_id("sessions-list")).to_be_attached()
    assert_accessible(page, "sessions list")

    session = f"a11y-{scheme}-{width}"
    open_session(page, dev_server, session)
    send(page, "Take a note of this")
    expect(turn_end(page, "completed")).to_be_visible()
    send(page, "Please deploy")
    expect(page.get_by_test_id("question")).to_contain_text("May I deploy")
    expect(page.get_by_test_id("sidebar-session").first).to_be_attached()
    shots.take(f"{scheme}-{width}-session-question")
    assert_accessible(page, "session with a question")

    page.get_by_test_id("answer-allow").click()
    expect(turn_end(page, "completed")).to_have_count(2)
    page.get_by_test_id("trace-link").click()
    expect(page.get_by_test_id("trace-line").first).to_be_visible()
    assert_accessible(page, "trace")
