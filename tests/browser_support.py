"""Where the browser tests (tests/console/) find Chromium and put their screenshots.

They drive Debian's ``chromium`` with Playwright for Python (``executable_path``; Playwright's
own browser downloads are never used). A missing browser fails those tests with the command
that installs it, in CI and locally alike (the suite shows no skips); ``make browser``, which
``make test`` runs first, installs it when run as root.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["INSTALL_COMMAND", "MissingBrowserError", "artifacts_dir", "chromium_path"]

INSTALL_COMMAND = "sudo apt-get install -y chromium   (or, as root: make browser)"


class MissingBrowserError(RuntimeError):
    """No Chromium to run the browser tests with."""


def chromium_path() -> str:
    """``$FXD_TEST_CHROMIUM``, else ``chromium`` on the PATH (Debian's /usr/bin/chromium)."""
    configured = os.environ.get("FXD_TEST_CHROMIUM")
    found = configured or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found or not Path(found).exists():
        raise MissingBrowserError(
            f"the browser tests need Chromium and found none "
            f"({'FXD_TEST_CHROMIUM=' + configured if configured else 'chromium not on PATH'}); "
            f"install it with: {INSTALL_COMMAND}"
        )
    return found


def artifacts_dir() -> Path:
    """``$FXD_TEST_ARTIFACTS/console``, else ``<tmp>/fxdurable-test-artifacts/console``: where
    each test writes a screenshot of every state it checks (``<test>-<nn>-<state>.png``)."""
    base = os.environ.get("FXD_TEST_ARTIFACTS") or os.path.join(
        tempfile.gettempdir(), "fxdurable-test-artifacts"
    )
    return Path(base) / "console"
