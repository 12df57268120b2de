"""Regenerates docs/coding-agent.png, the docs' picture of the coding agent's page after a
crash mid-edit (``make coding-screenshot`` runs it).

It serves the page as ``make coding-ui`` does (``fxdurable serve --dev --demo --agents
examples.coding_agent.web:agents``, the scripted model) from the repository's root with its
store and workspaces in a temporary directory, opens a session in headless Chromium (Debian's,
driven by Playwright), asks "Fix the failing tests", chooses "Yes, don't ask again" at the
first shell prompt, presses "Crash worker (kill -9)" while the first ``edit_file`` is held at
the test gate (``FXD_CODING_GATE``), lets it go, waits for the turn to complete on the
replacement worker, and screenshots the session view as it is in the window, scrolled to the
interruption.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from examples.coding_agent.task import TASK
from fxdurable.testing.net import free_port, stop_process, wait_healthy

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "coding-agent.png"
SESSION = "fix-the-tests"
WAIT_MS = 30_000
VIEWPORT = {"width": 1280, "height": 1000}
MODEL_CHOOSERS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")


def shoot(console_url: str, gate: Path, chromium: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        page.goto(f"{console_url}#/sessions/{SESSION}")
        expect(page.get_by_test_id("files-panel")).to_be_visible()
        prompt = page.get_by_test_id("prompt-input")
        prompt.fill(TASK)
        prompt.press("Enter")
        question = page.get_by_test_id("question")
        expect(question).to_contain_text("Run `python3 -m unittest -q`")
        question.get_by_test_id("answer-allow-always").click()
        held = '[data-testid="tool-call"][data-tool="edit_file"][data-status="running"]'
        expect(page.locator(held)).to_have_count(1)
        page.get_by_test_id("crash-button").click()
        expect(page.get_by_test_id("interruption").first).to_contain_text("INTERRUPTED")
        (gate / "edit_file.open").touch()
        end = page.locator('[data-testid="event"][data-kind="turn_end"]')
        expect(end).to_contain_text("Turn completed")
        expect(page.locator('[data-testid="file"][data-status="modified"]')).to_have_count(1)
        # What a person sees, not the whole page: a full-page shot draws the sticky header
        # and the side panels where the viewport last was, halfway down the log. The
        # interruption at the top (its line's scroll margin clears the header), the recovery and
        # the re-run edit's diff below it.
        page.get_by_test_id("interruption").first.evaluate(
            "e => (e.closest('[data-testid=event]') || e).scrollIntoView({block: 'start'})"
        )
        page.screenshot(path=OUTPUT)
        browser.close()


def main() -> int:
    chromium = os.environ.get("FXD_TEST_CHROMIUM", "/usr/bin/chromium")
    with tempfile.TemporaryDirectory(prefix="fxd-coding-shot-") as workdir:
        where = Path(workdir)
        gate = where / "gate"
        gate.mkdir()
        port = free_port()
        log_path = where / "serve.log"
        command = [sys.executable, "-m", "fxdurable.cli.main", "serve", "--dev", "--demo"]
        command += ["--port", str(port), "--db", str(where / "coding.db")]
        command += ["--agents", "examples.coding_agent.web:agents"]
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("FXD_") and k not in MODEL_CHOOSERS
        }
        env |= {"FXD_CODING_DIR": str(where / "coding"), "FXD_CODING_GATE": str(gate)}
        with log_path.open("wb") as log:
            # From the repository's root, as make coding-ui runs it: examples/ is importable.
            server = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(f"{url}/healthz", server, timeout_s=30, output=log_path.read_text)
            shoot(f"{url}/console/", gate, chromium)
        finally:
            stop_process(server)
        runs = len(list(gate.glob("edit_file.arrived.*")))
    print(f"wrote {OUTPUT.relative_to(REPO)} (edit_file reached the gate {runs} times)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
