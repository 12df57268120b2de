"""What the browser tests do on the console's pages, by the data-testids its contract names
(/console/, issue 14)."""

from __future__ import annotations

from console_server import ConsoleServer
from playwright.sync_api import Locator, Page, expect

__all__ = [
    "allow_until_done",
    "answer",
    "event_cursors",
    "open_gate_and_finish",
    "open_session",
    "send",
    "start_gated_turn",
    "tool_call",
    "turn_end",
]


def open_session(page: Page, server: ConsoleServer, session_id: str) -> None:
    page.goto(f"{server.console_url}#/sessions/{session_id}")
    expect(page.get_by_test_id("session-view")).to_be_visible()


def send(page: Page, text: str) -> None:
    """Type into the prompt box and press Enter: a submission when idle, steering when busy."""
    prompt = page.get_by_test_id("prompt-input")
    prompt.fill(text)
    prompt.press("Enter")


def start_gated_turn(page: Page, server: ConsoleServer, session_id: str, gate: str) -> None:
    """Open the session and start a turn of the test agent that waits, running, at ``gate``
    until ``server.open_gate(gate)``."""
    open_session(page, server, session_id)
    send(page, f"Wait at gate {gate}")
    expect(tool_call(page, "wait_for_gate", "running")).to_be_visible()


def open_gate_and_finish(page: Page, server: ConsoleServer, gate: str, says: str) -> None:
    """Let the turn waiting at ``gate`` go on, and wait until it completed saying ``says``."""
    server.open_gate(gate)
    expect(turn_end(page, "completed")).to_contain_text(says)


def tool_call(page: Page, tool: str, status: str | None = None) -> Locator:
    selector = f'[data-testid="tool-call"][data-tool="{tool}"]'
    if status is not None:
        selector += f'[data-status="{status}"]'
    return page.locator(selector)


def turn_end(page: Page, outcome: str) -> Locator:
    """The ``turn_end`` lines that say ``Turn <outcome>`` in words (readable without colour)."""
    return page.locator('[data-testid="event"][data-kind="turn_end"]').filter(
        has_text=f"Turn {outcome}"
    )


def event_cursors(page: Page) -> list[int]:
    """The ``data-cursor`` of every rendered line in the event log, in page order."""
    cursors = page.locator('[data-testid="event-log"] [data-testid="event"]').evaluate_all(
        "els => els.map(e => Number(e.dataset.cursor))"
    )
    return [int(c) for c in cursors]


# More shell prompts than the coding agent's scripted model asks in one turn.
MAX_PROMPTS = 12


def answer(page: Page, button: str) -> None:
    """Press ``button`` in the waiting question and wait for its answer's line in the log (not
    for the box to go: the next question may take its place at once)."""
    answered = page.locator('[data-testid="event"][data-kind="input.answered"]')
    before = answered.count()
    page.get_by_test_id("question").get_by_test_id(button).click()
    expect(answered).to_have_count(before + 1)


def allow_until_done(page: Page, turns: int = 1) -> int:
    """Answer Yes to each shell prompt of the coding agent until ``turns`` turns completed;
    how many were asked."""
    question = page.get_by_test_id("question")
    done = turn_end(page, "completed")
    for asked in range(MAX_PROMPTS):
        expect(question.or_(done.nth(turns - 1))).to_be_visible()
        if done.count() >= turns:
            return asked
        expect(question).to_contain_text("Run `")
        answer(page, "answer-allow")
    raise AssertionError(f"more than {MAX_PROMPTS} prompts")
