"""Regenerates docs/console-after-recovery.png, the docs' picture of the web console after
a crash and recovery (``scripts/console-screenshot`` runs it).

It starts ``fxdurable serve --dev --demo`` on a free port with a store in a temporary
directory, opens the demo's session in headless Chromium (Debian's, driven by Playwright),
sends the demo's prompt, presses "Crash worker (kill -9)" while the deploy runs, waits for the
turn to complete on the replacement worker, and screenshots the session view.
``crash_and_recover`` is the story itself; tests/console/test_console_crash.py runs it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from fxdurable.cli.demo_agent import PROMPT
from fxdurable.testing.net import free_port, stop_process, wait_healthy

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "console-after-recovery.png"
SESSION = "engineer"
WAIT_MS = 30_000
VIEWPORT = {"width": 1000, "height": 900}


def crash_and_recover(
    page: Page, console_url: str, snap: Callable[[str], object] = lambda state: None
) -> None:
    """The demo story in the console: submit, crash the worker mid-deploy, watch the turn
    recover. ``snap(state)`` is called at each state worth a picture."""
    page.goto(f"{console_url}#/sessions/{SESSION}")
    crash = page.get_by_test_id("crash-button")
    expect(crash).to_have_text("Crash worker (kill -9)", timeout=WAIT_MS)
    prompt = page.get_by_test_id("prompt-input")
    prompt.fill(PROMPT)
    prompt.press("Enter")

    def tool(name: str, status: str) -> str:
        return f'[data-testid="tool-call"][data-tool="{name}"][data-status="{status}"]'

    expect(page.locator(tool("deploy", "running"))).to_be_visible(timeout=WAIT_MS)
    snap("deploy-running")
    crash.click()
    expect(page.get_by_test_id("interruption").first).to_contain_text(
        "INTERRUPTED", timeout=WAIT_MS
    )
    expect(page.locator(tool("deploy", "outcome_unknown"))).to_contain_text(
        "OUTCOME UNKNOWN", timeout=WAIT_MS
    )
    snap("interrupted-outcome-unknown")
    expect(page.locator(tool("check_deployment", "completed"))).to_be_visible(timeout=WAIT_MS)
    end = page.locator('[data-testid="event"][data-kind="turn_end"]')
    expect(end).to_contain_text("Turn completed", timeout=WAIT_MS)
    snap("recovered")


def main() -> int:
    chromium = os.environ.get("FXD_TEST_CHROMIUM", "/usr/bin/chromium")
    with tempfile.TemporaryDirectory(prefix="fxd-console-shot-") as workdir:
        port = free_port()
        log_path = Path(workdir) / "serve.log"
        command = [sys.executable, "-m", "fxdurable.cli.main", "serve", "--dev", "--demo"]
        command += ["--port", str(port), "--store", f"sqlite:///{workdir}/demo.db"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                command, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(f"{url}/healthz", server, timeout_s=20, output=log_path.read_text)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, headless=True)
                page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
                crash_and_recover(page, f"{url}/console/")
                page.screenshot(path=OUTPUT, full_page=True)
                browser.close()
        finally:
            stop_process(server)
        deploys = (Path(workdir) / ".fxd-demo" / "deployments.log").read_text().splitlines()
    print(f"wrote {OUTPUT.relative_to(REPO)} (the deploy ran {len(deploys)} time(s))")
    return 0 if len(deploys) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
