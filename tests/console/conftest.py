"""Fixtures of the browser tests: one headless Chromium per test file (Debian's, driven by
Playwright for Python), a fresh browser context and page per test, real ``fxdurable serve``
subprocesses (``console_server.py``), and screenshots of each state a test checks.

Screenshots go to ``browser_support.artifacts_dir()`` as ``<test>-<nn>-<state>.png``; the
run prints that directory at its end (``tests/conftest.py``). A failing test also leaves
``<test>-failed.png`` and the server's log in the failure report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # whatever pytest's import mode, the tests import console_server
    sys.path.insert(0, HERE)

from browser_support import MissingBrowserError, artifacts_dir, chromium_path  # noqa: E402
from console_server import ConsoleServer  # noqa: E402
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright  # noqa: E402
from shots import Shots, clear_shots, safe_name  # noqa: E402

# How long a Playwright wait or expect may take before the test fails: generous, since a
# wait ends as soon as its condition holds (a turn of the test agent takes well under 1 s).
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)


# Module-scoped, not session-scoped: Playwright's sync API runs an asyncio loop in this thread
# while it is started, and a later test of the same process calling asyncio.run() would fail
# ("cannot be called from a running event loop"). It stops at the end of each test file.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    try:
        executable = chromium_path()
    except MissingBrowserError as exc:
        pytest.fail(str(exc), pytrace=False)
    browser = playwright.chromium.launch(executable_path=executable, headless=True)
    yield browser
    browser.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    script_errors: list[str] = []
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    clear_shots(request.node.name)
    yield page
    if request.node.stash.get(_FAILED, False):
        directory = artifacts_dir()
        directory.mkdir(parents=True, exist_ok=True)
        page.screenshot(
            path=directory / f"{safe_name(request.node.name)}-failed.png", full_page=True
        )
    context.close()
    assert not script_errors, f"the page threw: {script_errors}"


@pytest.fixture
def shots(page: Page, request: pytest.FixtureRequest) -> Shots:
    return Shots(page, request.node.name)


@pytest.fixture
def serve(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., ConsoleServer]]:
    """``serve(dev=..., demo=..., agents=..., token=...)`` starts a server; all are killed when
    the test ends (their logs printed if it failed)."""
    servers: list[ConsoleServer] = []

    def start(**kwargs: Any) -> ConsoleServer:
        server = ConsoleServer(tmp_path / f"serve{len(servers)}", **kwargs)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.kill()
        if request.node.stash.get(_FAILED, False):
            print(f"--- {server.log} ---\n{server.output()}")


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    """One ``serve --dev`` of the test agent for a module's tests (each uses its own
    session ids): a server start saved per test."""
    server = ConsoleServer(tmp_path_factory.mktemp("dev-server"))
    server.start()
    yield server
    server.kill()
