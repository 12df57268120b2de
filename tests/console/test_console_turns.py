"""The session view in headless Chromium against one ``fxdurable serve --dev`` of the test
agent (tests/console/console_agents.py): a turn streamed from submission to completion,
keyboard only; steering mid-turn; Esc aborting; a permission prompt answered (allow, edit
input, deny with a reason); a fork from the trace view; no horizontal scroll at 360 px.

A running turn waits at a gate (a file) that the test opens, so each state is on screen for
as long as the test looks at it, without sleeps.
"""

from __future__ import annotations

import json

from console_pages import (
    event_cursors,
    open_gate_and_finish,
    open_session,
    send,
    start_gated_turn,
    tool_call,
    turn_end,
)
from console_server import ConsoleServer
from playwright.sync_api import Browser, Page, expect
from shots import Shots

TAB_LIMIT = 40  # more Tab presses than the console has controls before the prompt box


def tab_to(page: Page, testid: str) -> None:
    """Move the keyboard focus with Tab alone until it is on ``testid``."""
    for _ in range(TAB_LIMIT):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement?.dataset?.testid ?? null")
        if focused == testid:
            return
    raise AssertionError(f"{TAB_LIMIT} Tab presses never reached {testid}")


def test_keyboard_only_submission_streams_a_turn_to_completion(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    page.goto(dev_server.console_url)
    expect(page.get_by_test_id("sessions-list")).to_be_attached()
    shots.take("sessions-list-empty")

    tab_to(page, "new-session")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("session-view")).to_be_visible()
    assert "#/sessions/" in page.url, page.url
    session_id = page.url.split("#/sessions/")[1]
    tab_to(page, "prompt-input")
    page.keyboard.type("Wait at gate k1 please")
    page.keyboard.press("Enter")

    running = tool_call(page, "wait_for_gate", "running")
    expect(running).to_contain_text("running")
    expect(running).to_have_attribute("data-policy", "safe")
    expect(page.get_by_test_id("tool-progress")).to_contain_text("waiting for gate k1")
    expect(page.get_by_test_id("connection")).to_have_text("live")
    shots.take("tool-running-with-progress")

    open_gate_and_finish(page, dev_server, "k1", "Done: gate k1 opened.")
    expect(tool_call(page, "wait_for_gate", "completed")).to_contain_text("completed")
    expect(page.get_by_test_id("turn-totals")).to_contain_text("token")
    expect(page.get_by_test_id("session-totals")).to_contain_text("token")
    cursors = event_cursors(page)
    assert len(cursors) == len(set(cursors)), cursors
    shots.take("turn-completed")

    page.goto(dev_server.console_url)
    row = page.locator(f'[data-testid="session-row"][data-session-id="{session_id}"]')
    expect(row).to_contain_text("idle")
    expect(row).to_contain_text("completed")
    shots.take("sessions-list-after-turn")


def test_typing_while_the_agent_works_steers_it(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    start_gated_turn(page, dev_server, "steer-1", "s1")
    expect(page.get_by_test_id("send-button")).to_have_text("Steer")

    send(page, "Also say banana")
    steer = page.locator('[data-testid="event"][data-kind="steer.recorded"]')
    expect(steer).to_contain_text("Also say banana")
    shots.take("steering-recorded")

    open_gate_and_finish(page, dev_server, "s1", "Noted: Also say banana")
    expect(page.locator('[data-testid="event"][data-kind="steer.delivered"]')).to_have_count(1)
    expect(page.locator('[data-testid="event"][data-kind="turn_end"]')).to_have_count(1)
    shots.take("steered-turn-completed")


def test_escape_aborts_the_running_turn(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    start_gated_turn(page, dev_server, "abort-1", "never")
    shots.take("running-before-abort")

    page.get_by_test_id("prompt-input").press("Escape")
    expect(turn_end(page, "aborted")).to_be_visible()
    expect(tool_call(page, "wait_for_gate", "cancelled")).to_contain_text("cancelled")
    shots.take("aborted")


def test_a_permission_prompt_is_answered_inline_allow_edit_deny(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    deployments = dev_server.gates / "deployments.log"
    open_session(page, dev_server, "ask-1")
    send(page, "Please deploy")
    question = page.get_by_test_id("question")
    expect(question).to_contain_text("May I deploy")
    shots.take("question-asked")
    assert not deployments.exists()  # nothing runs before a person allows it

    page.get_by_test_id("answer-allow").click()
    expect(turn_end(page, "completed")).to_contain_text("Done: release 2.0 deployed.")
    expect(tool_call(page, "deploy", "completed")).to_have_attribute("data-policy", "unsafe")
    expect(question).to_have_count(0)
    shots.take("allowed-and-completed")

    send(page, "Please deploy once more")
    expect(question).to_contain_text("May I deploy")
    page.get_by_test_id("answer-edit").click()
    edited = page.get_by_test_id("answer-input")
    expect(edited).not_to_have_value("")
    assert json.loads(edited.input_value()) == {"version": "2.0"}  # the call's arguments
    shots.take("editing-the-input")
    edited.fill(json.dumps({"version": "2.1"}))
    page.get_by_test_id("answer-submit").click()
    expect(turn_end(page, "completed")).to_have_count(2)
    expect(turn_end(page, "completed").last).to_contain_text("release 2.1 deployed")
    shots.take("edited-and-completed")

    send(page, "Please deploy a third time")
    expect(question).to_contain_text("May I deploy")
    page.get_by_test_id("answer-reason").fill("not on a Friday")
    page.get_by_test_id("answer-deny").click()
    expect(turn_end(page, "completed")).to_have_count(3)
    expect(turn_end(page, "completed").last).to_contain_text("denied: not on a Friday")
    expect(tool_call(page, "deploy", "failed")).to_contain_text("denied")
    shots.take("denied-and-completed")
    releases = [line.split()[0] for line in deployments.read_text().splitlines()]
    assert releases == ["release=2.0", "release=2.1"]  # the denied call never ran


def test_fork_from_the_trace_view_into_a_new_session(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    open_session(page, dev_server, "fork-src")
    send(page, "Remember the orchid")
    expect(turn_end(page, "completed")).to_contain_text("noted 'Remember the orchid'")

    page.get_by_test_id("trace-link").click()
    expect(page.get_by_test_id("trace-view")).to_be_visible()
    expect(page.get_by_test_id("trace-line").first).to_be_visible()
    forks = page.get_by_test_id("fork-button")
    expect(forks.first).to_be_visible()
    shots.take("trace")

    forks.last.click()
    page.get_by_test_id("fork-id-input").fill("fork-dst")
    shots.take("fork-dialog")
    page.get_by_test_id("fork-submit").click()
    page.wait_for_url("**#/sessions/fork-dst")
    expect(page.get_by_test_id("session-view")).to_contain_text("fork-dst")
    shots.take("forked-session")

    history = dev_server.api("GET", "/sessions/fork-dst/history")
    assert history.status_code == 200, history.text
    texts = [m.get("text", "") for m in history.json()["messages"]]
    assert "Remember the orchid" in texts, texts


def test_no_horizontal_scroll_at_360_px(
    browser: Browser, dev_server: ConsoleServer, shots: Shots
) -> None:
    context = browser.new_context(viewport={"width": 360, "height": 740})
    narrow = context.new_page()
    try:
        shots.page = narrow
        open_session(narrow, dev_server, "narrow-1")
        send(narrow, "Please deploy a_rather_long_unbroken_word_that_should_wrap_somewhere_ok")
        expect(narrow.get_by_test_id("question")).to_be_visible()
        pages = {
            "session-question": None,
            "trace": ("#/sessions/narrow-1/trace", "trace-line"),
            "sessions-list": ("#/", "session-row"),
        }
        for state, route in pages.items():
            if route is not None:
                narrow.goto(f"{dev_server.console_url}{route[0]}")
                expect(narrow.get_by_test_id(route[1]).first).to_be_visible()
            widths = narrow.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            shots.take(f"360px-{state}")
            assert widths[0] <= widths[1], f"{state}: scrolls sideways at 360 px ({widths})"
    finally:
        context.close()


def test_the_model_s_text_shows_while_it_streams(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    open_session(page, dev_server, "think-1")
    send(page, "Please think at t1")
    partial = page.get_by_test_id("partial-text")
    expect(partial).to_contain_text("Let me think")
    shots.take("model-text-streaming")

    open_gate_and_finish(page, dev_server, "t1", "one step at a time.")
    expect(partial).to_have_count(0)  # the recorded reply took its place
    shots.take("model-text-recorded")


def test_the_sessions_list_filters_by_state(
    page: Page, dev_server: ConsoleServer, shots: Shots
) -> None:
    open_session(page, dev_server, "filter-waits")
    send(page, "Please deploy")
    expect(page.get_by_test_id("question")).to_be_visible()

    page.goto(dev_server.console_url)
    row = page.locator('[data-testid="session-row"][data-session-id="filter-waits"]')
    expect(row).to_contain_text("waiting")
    page.get_by_test_id("state-filter").select_option("waiting")
    expect(row).to_be_visible()
    # A retrying check, not a snapshot: the rows of the list before the filter's answer
    # arrived (idle sessions among them) stay on the page for a moment.
    rows = page.get_by_test_id("session-row")
    expect(rows.filter(has_not_text="waiting")).to_have_count(0)
    shots.take("filtered-waiting")
    page.get_by_test_id("state-filter").select_option("idle")
    expect(row).to_have_count(0)
    shots.take("filtered-idle")
