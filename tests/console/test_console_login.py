"""Against a server with tokens (no ``--dev``), the console asks for the token when the API
answers 401, keeps it in the tab's session storage, and then lists the caller's sessions."""

from __future__ import annotations

from collections.abc import Callable

from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots

TOKEN = "console-test-token-0123456789abcdef"


def test_log_in_with_a_token_then_the_list_loads(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve(dev=False, token=TOKEN)
    reply = server.api("POST", "/chat", json={"sessionId": "before-login", "prompt": "hello"})
    assert reply.status_code == 200, reply.text
    assert '"turn_end"' in reply.text

    page.goto(server.console_url)
    expect(page.get_by_test_id("token-input")).to_be_visible()
    expect(page.get_by_test_id("session-row")).to_have_count(0)
    shots.take("token-asked")

    page.get_by_test_id("token-input").fill(TOKEN)
    page.get_by_test_id("token-save").click()
    row = page.locator('[data-testid="session-row"][data-session-id="before-login"]')
    expect(row).to_contain_text("completed")
    expect(page.get_by_test_id("token-input")).to_be_hidden()
    shots.take("signed-in-list")

    page.reload()  # the token is kept for the tab: no second prompt
    expect(row).to_be_visible()
    expect(page.get_by_test_id("token-input")).to_be_hidden()
