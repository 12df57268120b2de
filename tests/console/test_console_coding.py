"""The coding agent (examples/coding_agent, its scripted model) in the console, against a real
``fxdurable serve --dev --agents examples.coding_agent.agent:agents``: "fix the failing
tests" asked in the page completes, with every shell command allowed from its inline prompt,
the todo list live in its panel, each tool call shown once, and the project's tests passing
in the session's workspace; steering "also add one test for an empty cart" mid-turn gives 7
passing tests; a fork from before the first edit carries on in its own copy of the project.
In demo mode, the crash button pressed while ``edit_file`` runs (held at a test gate after its edit,
tests/console/coding_gated.py): the turn completes, each fix applied once, one card per fix;
pressed while ``shell`` runs the tests: outcome unknown, the tests run again, the turn
completes. The page's coding agent (``make coding-ui``'s, tests/console/coding_gated_web.py),
the crash button pressed while ``shell`` runs the tests after the fixes: each edit's diff is
shown once, the tests run again and pass.

Each session's workspace is a directory under ``<server dir>/.fxd-coding/workspace/`` (the
agent's directory workspace, one copy of the project per session).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from console_pages import allow_until_done, answer, open_session, send, tool_call, turn_end
from console_server import ConsoleServer
from playwright.sync_api import Page, expect
from shots import Shots

from examples.coding_agent.task import (
    CARRY_ON,
    EMPTY_CART_STEER,
    EMPTY_CART_TEST,
    TASK,
    run_project_tests,
)

CODING_AGENTS = "examples.coding_agent.agent:agents"


def coding_server(serve: Callable[..., ConsoleServer]) -> ConsoleServer:
    # The scripted model whatever the environment holds: the test must not call a provider.
    no_model = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "OPENAI_BASE_URL": ""}
    return serve(agents=CODING_AGENTS, env=no_model)


def workspace(server: ConsoleServer, session: str) -> Path:
    """The session's copy of the project: named after its stored id (the principal's scope,
    the public id, a hash: ``dev_<id>-<hash>``)."""
    name = re.compile(rf"dev_{re.escape(session)}-[0-9a-f]+")
    found = [
        p
        for p in (server.workdir / ".fxd-coding" / "workspace").iterdir()
        if name.fullmatch(p.name)
    ]
    assert len(found) == 1, found
    return found[0]


def ran_count(stderr: str) -> int:
    ran = re.search(r"Ran (\d+) tests?", stderr)
    assert ran, stderr
    return int(ran.group(1))


def test_fix_the_failing_tests_completes_in_the_page(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = coding_server(serve)
    open_session(page, server, "fix-1")
    send(page, TASK)
    expect(page.get_by_test_id("question")).to_contain_text("python3 -m unittest")
    expect(page.get_by_test_id("todos-panel")).to_be_visible()
    expect(page.get_by_test_id("todo").first).to_be_visible()
    shots.take("first-shell-prompt-with-todos")

    assert allow_until_done(page) >= 2  # before and after the fixes
    todos = page.locator('[data-testid="todo-list"] [data-testid="todo"]')
    statuses = todos.evaluate_all("els => els.map(e => e.dataset.status)")
    assert statuses and set(statuses) == {"completed"}, statuses
    tasks = page.locator('[data-testid="tool-call"]').evaluate_all(
        "els => els.map(e => e.dataset.task)"
    )
    assert len(tasks) == len(set(tasks)), tasks  # each call once
    edits = page.locator('[data-testid="tool-call"][data-tool="edit_file"]')
    expect(edits).to_have_count(2)
    expect(page.locator('[data-testid="tool-call"][data-tool="explore"]')).to_have_count(1)
    shots.take("completed")

    result = run_project_tests(workspace(server, "fix-1"))
    assert result.returncode == 0, result.stderr
    assert ran_count(result.stderr) == 6


def test_steering_mid_turn_adds_the_empty_cart_test(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = coding_server(serve)
    open_session(page, server, "steer-1")
    send(page, TASK)
    expect(page.get_by_test_id("question")).to_be_visible()  # the turn waits: it runs
    expect(page.get_by_test_id("send-button")).to_have_text("Steer")
    send(page, EMPTY_CART_STEER)
    steer = page.locator('[data-testid="event"][data-kind="steer.recorded"]')
    expect(steer).to_contain_text(EMPTY_CART_STEER)
    shots.take("steered-while-asking")

    allow_until_done(page)
    result = run_project_tests(workspace(server, "steer-1"))
    assert result.returncode == 0, result.stderr
    assert ran_count(result.stderr) == 7
    tests = (workspace(server, "steer-1") / "tests" / "test_cart.py").read_text()
    assert EMPTY_CART_TEST in tests
    shots.take("seven-tests-pass")


def test_a_fork_from_before_the_first_edit_works_on_its_own_copy(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = coding_server(serve)
    open_session(page, server, "fork-1")
    send(page, TASK)
    allow_until_done(page)
    first_edit = page.locator('[data-testid="event"][data-kind="tool.started"]').filter(
        has=page.locator('[data-tool="edit_file"]')
    )
    before_edit = int(first_edit.first.get_attribute("data-cursor") or "0") - 1

    # The fork points the trace view will render, from the route it renders them from; the
    # view fills its list in once, when GET /sessions/{id}/trace answers: wait for it to show
    # them all (reading the buttons before that found none, or some).
    trace = server.api("GET", "/sessions/fork-1/trace").json()["lines"]
    forkable = [line["forkAfter"] for line in trace if line.get("forkAfter") is not None]
    after = max(p for p in forkable if isinstance(p, int) and p <= before_edit)
    page.get_by_test_id("trace-link").click()
    expect(page.get_by_test_id("fork-button")).to_have_count(len(forkable))
    page.locator(f'[data-testid="fork-button"][data-after="{after}"]').click()
    page.get_by_test_id("fork-id-input").fill("fork-1-copy")
    page.get_by_test_id("fork-submit").click()
    expect(page.locator("#session-title")).to_contain_text("fork-1-copy")
    shots.take("forked")

    send(page, CARRY_ON)
    allow_until_done(page)
    expect(page.locator('[data-testid="tool-call"][data-tool="edit_file"]')).to_have_count(2)
    shots.take("fork-completed")
    for session in ("fork-1", "fork-1-copy"):
        result = run_project_tests(workspace(server, session))
        assert result.returncode == 0, f"{session}: {result.stderr}"


GATED_AGENTS = "tests.console.coding_gated:agents"
GATED_PAGE_AGENTS = "tests.console.coding_gated_web:agents"


def gated_demo_server(
    serve: Callable[..., ConsoleServer], agents: str = GATED_AGENTS
) -> ConsoleServer:
    """``--demo`` (the turns in a worker process the crash button SIGKILLs) of the coding
    agent whose edit_file and shell wait at their gates (tests/console/coding_gated.py)."""
    no_model = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "OPENAI_BASE_URL": ""}
    return serve(demo=True, agents=agents, env=no_model)


def press_crash(page: Page) -> None:
    crash = page.get_by_test_id("crash-button")
    expect(crash).to_be_in_viewport()  # the sticky header: in view wherever the log is
    crash.click()
    expect(page.get_by_test_id("interruption").first).to_contain_text("INTERRUPTED")


def start_held_at(page: Page, server: ConsoleServer, session: str, tool: str) -> None:
    """Ask the task with every gate but ``tool``'s open, allow the first shell command, and
    wait until a call of ``tool`` is running, held at its gate."""
    server.open_gate(next(t for t in ("edit_file", "shell") if t != tool))
    open_session(page, server, session)
    send(page, TASK)
    page.get_by_test_id("question").get_by_test_id("answer-allow").click()
    held = page.locator(f'[data-testid="tool-call"][data-tool="{tool}"][data-status="running"]')
    expect(held.get_by_test_id("tool-progress")).to_contain_text(f"waiting for gate {tool}")


def test_crash_while_edit_file_runs_each_fix_is_applied_once(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = gated_demo_server(serve)
    start_held_at(page, server, "crash-edit", "edit_file")
    shots.take("edit-running-at-the-gate")

    press_crash(page)
    expect(page.locator("[data-recovery^='edit_file run again']")).to_have_count(1)
    shots.take("edit-rerun-after-the-crash")
    server.open_gate("edit_file")
    allow_until_done(page)
    edits = page.locator('[data-testid="tool-call"][data-tool="edit_file"]')
    expect(edits).to_have_count(2)  # one card per fix, the re-run in the first one's
    expect(edits.first).to_contain_text("already applied; not applied again")
    shots.take("completed-after-the-crash")

    where = workspace(server, "crash-edit")
    assert (where / "shop" / "cart.py").read_text().count("unit_price * qty") == 1
    result = run_project_tests(where)
    assert result.returncode == 0, result.stderr


def test_crash_while_shell_runs_the_tests_they_run_again_after_a_look(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    server = gated_demo_server(serve)
    start_held_at(page, server, "crash-shell", "shell")
    shots.take("tests-running-at-the-gate")

    press_crash(page)
    unknown = page.locator(
        '[data-testid="tool-call"][data-tool="shell"][data-status="outcome_unknown"]'
    )
    expect(unknown).to_contain_text("OUTCOME UNKNOWN")
    expect(page.get_by_test_id("recovery-status")).to_contain_text("outcome unknown")
    shots.take("shell-outcome-unknown")
    server.open_gate("shell")
    allow_until_done(page)
    expect(unknown).to_have_count(1)
    result = run_project_tests(workspace(server, "crash-shell"))
    assert result.returncode == 0, result.stderr
    shots.take("completed-after-the-crash")


def test_crash_while_shell_runs_the_tests_on_the_page_each_diff_is_shown_once(
    page: Page, serve: Callable[..., ConsoleServer], shots: Shots
) -> None:
    """The page's agent, its edits answering with their diffs: the gates open for the first
    test run and the fixes, the shell's closed again before the run after them is allowed."""
    server = gated_demo_server(serve, GATED_PAGE_AGENTS)
    for tool in ("edit_file", "shell"):
        server.open_gate(tool)
    open_session(page, server, "crash-shell-diffs")
    send(page, TASK)
    answer(page, "answer-allow")  # the first test run
    edits = tool_call(page, "edit_file")
    expect(edits.get_by_test_id("diff")).to_have_count(2)
    question = page.get_by_test_id("question")
    expect(question).to_contain_text("Run `python3 -m unittest -q`")  # the run after the fixes
    (server.gates / "shell").unlink()  # closed: that run does its work, then waits
    answer(page, "answer-allow")
    held = tool_call(page, "shell", "running")
    expect(held.get_by_test_id("tool-progress")).to_contain_text("waiting for gate shell")
    shots.take("tests-after-the-fixes-at-the-gate")

    press_crash(page)
    unknown = tool_call(page, "shell", "outcome_unknown")
    expect(unknown).to_have_count(1)
    expect(page.get_by_test_id("recovery-status")).to_contain_text("outcome unknown")
    server.open_gate("shell")
    allow_until_done(page)
    expect(turn_end(page, "completed")).to_have_count(1)
    expect(edits).to_have_count(2)  # one card per fix, each with its diff once
    for n in range(2):
        expect(edits.nth(n).get_by_test_id("diff")).to_have_count(1)
    expect(page.get_by_test_id("diff")).to_have_count(2)
    last = tool_call(page, "shell").last
    expect(last.get_by_test_id("exit-status")).to_contain_text("exit 0")
    shots.take("completed-after-the-crash-each-diff-once")
    where = workspace(server, "crash-shell-diffs")
    assert (where / "shop" / "cart.py").read_text().count("unit_price * qty") == 1
    result = run_project_tests(where)
    assert result.returncode == 0, result.stderr
