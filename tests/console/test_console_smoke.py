"""The console loads in headless Chromium from a real ``fxdurable serve --dev``: ``/``
redirects to it, its modules load, and the sessions list asks the API (no script error: the
``page`` fixture fails a test whose page threw one)."""

from __future__ import annotations

from collections.abc import Callable

from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots


def test_the_console_loads_and_slash_leads_to_it(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve()
    response = page.goto(f"{server.url}/")
    assert response is not None and response.status == 200
    assert page.url.startswith(server.console_url), page.url
    expect(page.get_by_test_id("sessions-list")).to_be_attached()
    expect(page.get_by_test_id("new-session")).to_be_visible()
    expect(page.get_by_test_id("crash-button")).to_be_hidden()  # not in demo mode
    shots.take("sessions-list")
