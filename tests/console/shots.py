"""Screenshots of the states a browser test checks, named by test and state."""

from __future__ import annotations

import re
from pathlib import Path

from browser_support import artifacts_dir
from playwright.sync_api import Page


def safe_name(test: str) -> str:
    """A test's name as a file name (``test_x[demo]`` -> ``test_x_demo_``)."""
    return re.sub(r"[^\w.-]+", "_", test)


def clear_shots(test: str) -> None:
    """Remove a test's pictures of an earlier run (``<test>-*.png``), so what is there after
    it ran is its own."""
    for old in artifacts_dir().glob(f"{safe_name(test)}-*.png"):
        old.unlink(missing_ok=True)


class Shots:
    """Numbered screenshots of one test: ``take("streaming")`` writes
    ``<test>-01-streaming.png``."""

    def __init__(self, page: Page, test: str) -> None:
        self.page = page
        self.test = safe_name(test)
        self.directory = artifacts_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self.paths: list[Path] = []

    def take(self, state: str) -> Path:
        """The window as a person sees it: a full-page shot draws the sticky header (and the
        coding page's side panels) where the viewport is, halfway down a long log."""
        self.count += 1
        path = self.directory / f"{self.test}-{self.count:02d}-{state}.png"
        self.page.screenshot(path=path)
        self.paths.append(path)
        return path
