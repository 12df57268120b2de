"""Demo mode (``fxdurable serve --dev --demo``): the red button SIGKILLs the worker process
mid-deploy, and the session view shows the recovery: the interruption, the deploy's outcome
unknown, the model checking production before acting again, the turn completing. The deploy
happened once (the demo agent's ledger of the server's store, console.deployments.log). The
button stays in view however far the log scrolls (a sticky header); after a press the page
highlights the recovery's lines as they arrive; each tool call shows once.

The story is ``scripts/console_screenshot.py``'s, which makes the picture on the
console page (docs/console.md)."""

from __future__ import annotations

from collections.abc import Callable

from console_server import REPO, ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots

from scripts.console_screenshot import crash_and_recover


def test_crash_button_kills_the_worker_and_the_turn_recovers(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve(dev=True, demo=True, agents=None)
    crash_and_recover(page, server.console_url, shots.take)

    # The recovery is highlighted, each step with its word, and told in a live region.
    interruption = page.locator('[data-testid="event"][data-kind="attempt.interrupted"]')
    expect(interruption).to_have_attribute("data-recovery", "interrupted")
    unknown = page.locator('[data-testid="event"]:has([data-status="outcome_unknown"])')
    expect(unknown).to_have_attribute("data-recovery", "outcome unknown")
    expect(page.get_by_test_id("recovery-status")).to_contain_text(
        "After the crash: interrupted → resumed on"
    )
    expect(page.locator("[data-recovery^='the check']")).to_have_count(1)

    # Each call once: one card per task, and no separate settlement line in view.
    tasks = page.locator('[data-testid="tool-call"]:visible').evaluate_all(
        "els => els.map(e => e.dataset.task)"
    )
    assert len(tasks) == len(set(tasks)) >= 3, tasks
    expect(page.locator(".ev-tool-result:visible")).to_have_count(0)

    # The header sticks: the button is in view at the bottom of the long log too.
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    expect(page.get_by_test_id("crash-button")).to_be_in_viewport()
    shots.take("scrolled-down-button-in-view")

    deployments = server.workdir / "console.deployments.log"  # the ledger of its console.db
    assert len(deployments.read_text().splitlines()) == 1, deployments.read_text()


def test_the_docs_show_the_committed_picture_of_it() -> None:
    """scripts/console-screenshot writes it; the docs' "Web console" page shows it."""
    picture = REPO / "docs" / "console-after-recovery.png"
    assert f"]({picture.name})" in (REPO / "docs" / "console.md").read_text()
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
