"""Demo mode (``fxdurable serve --dev --demo``): the red button SIGKILLs the worker process
mid-deploy, and the session view shows the recovery: the interruption, the deploy's outcome
unknown, the model checking production before acting again, the turn completing. The deploy
happened once (the demo agent's deployments.log, in the server's working directory).

The story is ``scripts/console_screenshot.py``'s, which makes the picture on the
console page (docs/console.md)."""

from __future__ import annotations

from collections.abc import Callable

from console_server import REPO, ConsoleServer
from playwright.sync_api import Page
from shots import Shots

from scripts.console_screenshot import crash_and_recover


def test_crash_button_kills_the_worker_and_the_turn_recovers(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = serve(dev=True, demo=True, agents=None)
    crash_and_recover(page, server.console_url, shots.take)

    deployments = server.workdir / ".fxd-demo" / "deployments.log"
    assert len(deployments.read_text().splitlines()) == 1, deployments.read_text()


def test_the_docs_show_the_committed_picture_of_it() -> None:
    """scripts/console-screenshot writes it; the docs' "Web console" page shows it."""
    picture = REPO / "docs" / "console-after-recovery.png"
    assert f"]({picture.name})" in (REPO / "docs" / "console.md").read_text()
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
