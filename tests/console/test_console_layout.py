"""The session view's frame around the log, against ``fxdurable serve --dev`` of the test
agent: the sessions sidebar (the open session marked, a click opens another), Esc aborting
from anywhere on the page (not only the prompt box), ``/fork N`` typed in the composer, and
each tool call shown once."""

from __future__ import annotations

from console_pages import open_session, send, start_gated_turn, tool_call, turn_end
from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots


def test_the_sidebar_lists_the_sessions_and_marks_the_open_one(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    for session in ("side-a", "side-b"):
        open_session(page, dev_server, session)
        send(page, f"Take a note for {session}")
        expect(turn_end(page, "completed")).to_be_visible()
    current = page.locator('[data-testid="sidebar-session"][data-session-id="side-b"] a')
    expect(current).to_have_attribute("aria-current", "page")
    shots.take("sidebar")

    page.locator('[data-testid="sidebar-session"][data-session-id="side-a"] a').click()
    expect(page.locator("#session-title")).to_contain_text("side-a")
    expect(page.get_by_test_id("turn-state")).to_have_text("idle")
    other = page.locator('[data-testid="sidebar-session"][data-session-id="side-a"] a')
    expect(other).to_have_attribute("aria-current", "page")


def test_escape_anywhere_on_the_page_interrupts_the_turn(
    page: Page, dev_server: ConsoleServer
) -> None:
    start_gated_turn(page, dev_server, "esc-page", "never-esc")
    page.locator("#session-title").focus()  # away from the prompt box
    page.keyboard.press("Escape")
    expect(turn_end(page, "aborted")).to_be_visible()
    expect(tool_call(page, "wait_for_gate", "cancelled")).to_be_visible()


def test_each_tool_call_shows_once(page: Page, dev_server: ConsoleServer, shots: Shots) -> None:
    open_session(page, dev_server, "once-1")
    send(page, "Take a note of it")
    expect(turn_end(page, "completed")).to_be_visible()
    expect(tool_call(page, "note")).to_have_count(1)
    settled = page.locator('[data-testid="event"][data-kind="tool.completed"]')
    expect(settled).to_have_count(1)  # in the log, for its cursor
    expect(settled).to_be_hidden()  # but not shown: the card says it
    result = page.get_by_text("noted 'Take a note of it'", exact=True)  # the call's result
    expect(result).to_have_count(1)
    shots.take("one-card")


def test_slash_fork_with_a_step_forks_after_it(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    open_session(page, dev_server, "fork-src")
    send(page, "Take a note of the first")
    expect(turn_end(page, "completed")).to_be_visible()
    started = page.locator('[data-testid="event"][data-kind="turn.started"]').first
    after = int(started.get_attribute("data-cursor") or "0")

    send(page, f"/fork {after}")
    expect(page.locator("#session-title")).not_to_contain_text("fork-src")
    forked = page.locator('[data-testid="event"][data-kind="session.created"]')
    expect(forked).to_contain_text(f"Session forked from fork-src after line {after}")
    shots.take("forked")

    send(page, "/fork")  # alone: the trace, where every step has its "Fork here"
    expect(page.get_by_test_id("trace-view")).to_be_visible()
