"""The coding agent's page as ``make coding-ui`` serves it, in a browser: a real
``fxdurable serve --dev --demo --agents examples.coding_agent.web:agents`` and its worker
process, the scripted model. Each state the issue lists, with a screenshot of it:

- each edit's diff shown once, in its own card; the terminal panel with the shell's output
  and exit status (the tests fail first, pass after the fixes); the files panel marking the
  changed file; the explore subagent's transcript, folded in its card; axe-core finds no
  serious violation (light and dark; a plan waiting; 360 px);
- plan mode switched on in the page refuses the shell and an edit (no diff, the file as it
  was) until the plan is approved; the approval, an answer, holds across the crash button
  pressed while the same edit, now made, is held at the test gate; its diff is shown once;
- "Yes, don't ask again" chosen at the first prompt survives the crash button (a SIGKILL of
  the worker) pressed while an edit is held at the test gate (``FXD_CODING_GATE``), and is
  revocable in the grants panel; the press scrolls the page from the top of the log to the
  recovery; each fix's diff is shown once.

``make coding-ui`` itself, in a checkout, is test_console_coding_make.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from axe_check import assert_accessible
from console_pages import allow_until_done, answer, open_session, send, tool_call, turn_end
from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots

from examples.coding_agent.task import TASK, run_project_tests
from fxdurable.tools.directory_workspace import safe_name

WEB_AGENTS = "examples.coding_agent.web:agents"
CART = "shop/cart.py"
NO_MODEL = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "OPENAI_BASE_URL": ""}


def coding_ui(serve: Callable[..., ConsoleServer], gate: Path | None = None) -> ConsoleServer:
    env = dict(NO_MODEL)
    if gate is not None:
        gate.mkdir(parents=True, exist_ok=True)
        env["FXD_CODING_GATE"] = str(gate)
    return serve(demo=True, agents=WEB_AGENTS, env=env)


def workspace(server: ConsoleServer, session: str) -> Path:
    # web.py's coding_dir(): .fxd-coding under the server's working directory.
    return server.workdir / ".fxd-coding" / "workspace" / safe_name(f"dev/{session}")


def test_diffs_terminal_and_files_panel(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = coding_ui(serve)
    open_session(page, server, "ui-fix")
    expect(page.get_by_test_id("files-panel")).to_be_visible()
    expect(page.locator(f'[data-testid="file"][data-path="{CART}"]')).to_have_attribute(
        "data-status", "unchanged"
    )
    send(page, TASK)
    assert allow_until_done(page) == 2  # the tests before and after the fixes

    edits = tool_call(page, "edit_file")
    expect(edits).to_have_count(2)
    for n in range(2):  # each edit's diff once, in its own card
        expect(edits.nth(n).get_by_test_id("diff")).to_have_count(1)
    expect(page.get_by_test_id("diff")).to_have_count(2)
    shots.take("diffs")

    shells = tool_call(page, "shell")
    expect(shells).to_have_count(2)
    first, last = shells.nth(0), shells.nth(1)
    expect(first.get_by_test_id("terminal")).to_contain_text("$ python3 -m unittest -q")
    expect(first.get_by_test_id("exit-status")).to_contain_text("exit 1")
    expect(first.get_by_test_id("terminal-output")).to_contain_text("FAILED")
    expect(last.get_by_test_id("exit-status")).to_contain_text("exit 0")
    expect(last.get_by_test_id("terminal-output")).to_contain_text("OK")
    shots.take("terminal")

    cart = page.locator(f'[data-testid="file"][data-path="{CART}"]')
    expect(cart).to_have_attribute("data-status", "modified")
    expect(cart).to_contain_text("(modified)")
    expect(page.locator('[data-testid="file"][data-path="tests/test_cart.py"]')).to_have_attribute(
        "data-status", "unchanged"
    )
    expect(page.get_by_test_id("files-summary")).to_contain_text("1 changed")
    page.get_by_test_id("files-panel").scroll_into_view_if_needed()
    shots.take("files-panel")

    # The explore call's card holds its subagent's transcript, folded until opened.
    subagent = tool_call(page, "explore").get_by_test_id("subagent")
    expect(subagent).to_have_count(1)
    child = subagent.get_by_test_id("child-log")
    expect(child).not_to_be_visible()
    subagent.locator("summary").click()
    expect(child.locator('[data-testid="tool-call"][data-tool="glob_files"]')).to_have_count(1)
    expect(child.locator('[data-testid="tool-call"][data-tool="grep_files"]')).to_have_count(1)
    shots.take("subagent-transcript-open")

    # Diffs, terminals, the files, plan and grants panels: axe-core finds nothing serious,
    # in either colour scheme.
    assert_accessible(page, "coding page, completed (light)")
    page.emulate_media(color_scheme="dark")
    assert_accessible(page, "coding page, completed (dark)")
    shots.take("completed-dark")
    assert run_project_tests(workspace(server, "ui-fix")).returncode == 0


def test_plan_mode_refuses_a_write_until_the_plan_is_approved_then_edits(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    server = coding_ui(serve, gate)  # the gate closed: each edit that runs waits at it
    open_session(page, server, "ui-plan")
    toggle = page.get_by_test_id("plan-toggle")
    toggle.check()
    expect(page.get_by_test_id("plan-panel")).to_contain_text("On: the agent can only read")
    assert server.api("GET", "/coding/sessions/ui-plan/settings").json()["planMode"] is True
    send(page, TASK)
    question = page.get_by_test_id("question")
    expect(question).to_contain_text("1. Run the tests")
    expect(tool_call(page, "shell").first).to_contain_text("denied: plan mode is on")
    # The first fix tried in plan mode: refused before it ran, no diff, the file as it was.
    refused = tool_call(page, "edit_file")
    expect(refused).to_have_count(1)
    expect(refused).to_contain_text("denied: plan mode is on")
    expect(page.get_by_test_id("diff")).to_have_count(0)
    assert not list(gate.glob("edit_file.arrived.*"))  # it never reached the tool
    template = Path(__file__).resolve().parents[2] / "examples/coding_agent/project" / CART
    cart = workspace(server, "ui-plan") / CART
    assert cart.read_text() == template.read_text()
    # The window's shot: the refused edit at the top (its line's scroll margin clears the
    # sticky header), the plan below it.
    refused.evaluate("e => e.closest('[data-testid=event]').scrollIntoView({block: 'start'})")
    shots.take("plan-waiting-for-approval")
    assert_accessible(page, "coding page, a plan waiting for approval")

    answer(page, "answer-allow")  # approve the plan
    expect(toggle).not_to_be_checked()  # approval turned plan mode off
    expect(question).to_contain_text("Run `python3 -m unittest -q`")
    answer(page, "answer-allow")
    made = tool_call(page, "edit_file", "running")
    expect(made).to_have_count(1)  # the same edit, made now: held at the gate
    # The approval is an answer in the session's log: after a SIGKILL of the worker the
    # recovery carries on without asking for the plan again.
    page.get_by_test_id("crash-button").click()
    expect(page.get_by_test_id("interruption").first).to_contain_text("INTERRUPTED")
    (gate / "edit_file.open").touch()
    allow_until_done(page)  # each question after this is a shell prompt, never the plan
    expect(toggle).not_to_be_checked()
    edits = tool_call(page, "edit_file")
    expect(edits).to_have_count(3)  # the refused one, the same edit made, the second fix
    expect(edits.first.get_by_test_id("diff")).to_have_count(0)
    for n in (1, 2):
        expect(edits.nth(n).get_by_test_id("diff")).to_have_count(1)
    expect(edits.nth(1)).to_contain_text("run 2 (recovery)")
    expect(edits.nth(1).get_by_test_id("diff")).to_contain_text("unit_price * qty")
    expect(page.get_by_test_id("diff")).to_have_count(2)  # each fix's diff once
    shots.take("plan-approved-then-edited")
    assert cart.read_text().count("unit_price * qty") == 1
    assert run_project_tests(workspace(server, "ui-plan")).returncode == 0


def test_dont_ask_again_survives_the_crash_button_and_is_revocable(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    server = coding_ui(serve, gate)  # the gate closed: each edit waits for edit_file.open
    open_session(page, server, "ui-grant")
    send(page, TASK)
    question = page.get_by_test_id("question")
    expect(question).to_contain_text("Run `python3 -m unittest -q`")
    question.get_by_test_id("answer-allow-always").click()
    grant = page.locator('[data-testid="grant"][data-tool="shell"]')
    expect(grant).to_be_visible()
    expect(tool_call(page, "edit_file", "running")).to_have_count(1)  # held at the gate
    shots.take("edit-held-shell-granted")

    # From the top of the log, far from where the interruption will be: after the press the
    # page scrolls to it (and to the recovery's lines as they arrive).
    page.evaluate("window.scrollTo(0, 0)")
    expect(tool_call(page, "edit_file", "running")).not_to_be_in_viewport()
    page.get_by_test_id("crash-button").click()
    expect(page.get_by_test_id("interruption").first).to_contain_text("INTERRUPTED")
    rerun = page.locator("[data-recovery^='edit_file run again']")
    expect(rerun).to_be_in_viewport()
    shots.take("scrolled-to-the-recovery")
    (gate / "edit_file.open").touch()
    done = turn_end(page, "completed")
    expect(question.or_(done)).to_be_visible()
    expect(done).to_have_count(1)  # no prompt: the grant held for the new worker
    expect(question).to_have_count(0)
    expect(grant).to_be_visible()
    # Shown from the session's own state in the store, where the grant was recorded.
    state = server.api("GET", "/sessions/ui-grant").json()["state"]
    assert state["allowed_tools"] == ["shell"]
    shots.take("completed-after-the-crash-without-asking")
    cart = (workspace(server, "ui-grant") / CART).read_text()
    assert cart.count("unit_price * qty") == 1
    # Each fix's diff once, the re-run edit's in the first edit's card.
    edits = tool_call(page, "edit_file")
    expect(edits).to_have_count(2)
    expect(edits.first).to_contain_text("run 2 (recovery)")
    for n in range(2):
        expect(edits.nth(n).get_by_test_id("diff")).to_have_count(1)
    expect(page.get_by_test_id("diff")).to_have_count(2)

    grant.get_by_test_id("revoke").click()
    expect(page.get_by_test_id("no-grants")).to_be_visible()
    settings = server.api("GET", "/coding/sessions/ui-grant/settings").json()
    assert settings["allowedTools"] == []
    assert server.api("GET", "/sessions/ui-grant").json()["state"]["allowed_tools"] == []
    shots.take("grant-revoked")


def tab_to(page: Page, testid: str, limit: int = 80) -> None:
    """Press Tab until the element ``testid`` has the focus (the keyboard's way there)."""
    for _ in range(limit):
        if page.evaluate(f"document.activeElement?.dataset?.testid === {testid!r}"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"{limit} Tabs never reached {testid}")


def test_keyboard_only_at_360_px(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    """A phone-wide window, no mouse: the task asked, "don't ask again" chosen and the turn
    completed with the keyboard alone, then the grant revoked and plan mode switched on;
    nothing wider than the window."""
    page.set_viewport_size({"width": 360, "height": 780})
    server = coding_ui(serve)
    open_session(page, server, "ui-keys")
    tab_to(page, "prompt-input")
    page.keyboard.type(TASK)
    page.keyboard.press("Enter")
    question = page.get_by_test_id("question")
    expect(question).to_contain_text("Run `python3 -m unittest -q`")
    tab_to(page, "answer-allow-always")
    shots.take("question-focused-at-360")
    assert_accessible(page, "coding page at 360 px, a shell prompt")
    page.keyboard.press("Enter")
    expect(turn_end(page, "completed")).to_be_visible()
    expect(question).to_have_count(0)  # the grant answered the second prompt too
    expect(page.locator('[data-testid="grant"][data-tool="shell"]')).to_be_attached()
    expect(tool_call(page, "edit_file")).to_have_count(2)
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= 360, f"the page is {wide} px wide at 360"
    expect(page.get_by_test_id("crash-button")).to_be_in_viewport()
    shots.take("completed-at-360")

    # The panels by keyboard too: revoke the grant, switch plan mode on.
    tab_to(page, "revoke")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("no-grants")).to_be_visible()
    tab_to(page, "plan-toggle")
    page.keyboard.press("Space")
    expect(page.get_by_test_id("plan-toggle")).to_be_checked()
    expect(page.get_by_test_id("plan-panel")).to_contain_text("On: the agent can only read")
    settings = server.api("GET", "/coding/sessions/ui-keys/settings").json()
    assert (settings["planMode"], settings["allowedTools"]) == (True, [])
    shots.take("panels-by-keyboard-at-360")
