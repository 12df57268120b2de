"""The browser tests' machinery works end to end: headless Chromium loads a page from a real
``fxdurable serve`` subprocess, and a screenshot of it lands in the artifacts directory."""

from __future__ import annotations

from collections.abc import Callable

from console_server import ConsoleServer
from playwright.sync_api import Page
from shots import Shots


def test_the_browser_reaches_a_real_server(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve()
    response = page.goto(f"{server.url}/healthz")
    assert response is not None and response.status == 200
    assert shots.take("healthz").stat().st_size > 0
