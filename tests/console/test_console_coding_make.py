"""``make coding-ui`` as the README and docs/coding-agent.md give it, run in a checkout (the
Makefile, the examples, this venv: tests/checkout_support.py) with no model key, and the page
it serves driven in headless Chromium until "Fix the failing tests" completes:

- the README's ``make coding-ui``: the scripted model in the worker's process;
- the docs' two terminals "Against a local OpenAI-compatible server": the scripted policy
  served over HTTP by ``python -m fxdurable.testing.model_server`` in a process of its own,
  ``make coding-ui`` pointed at it by ``OPENAI_BASE_URL``: every model call is a request the
  server logged, and the worker's startup line credits the endpoint to ``OPENAI_BASE_URL``.

The commands run verbatim but for the ports (free ones instead of 8765 and 8000: ``ARGS``
from the environment, which make reads as its variable) and ``FXD_CODING_PACE_S=0`` (the
pause before each edit is there for a person to press the crash button; nobody does here).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checkout_support import checkout
from console_pages import allow_until_done, send, tool_call
from docs_blocks import README, ROOT, blocks
from playwright.sync_api import Page, expect
from shots import Shots

from examples.coding_agent.task import TASK, run_project_tests
from fxdurable.testing.net import free_port, wait_healthy
from fxdurable.tools.directory_workspace import safe_name

HERE = f"tests/console/{Path(__file__).name}"
MAKE_TEST = f"{HERE}::test_make_coding_ui_in_a_checkout_fixes_the_failing_tests"
LOCAL_SERVER_TEST = f"{HERE}::test_the_page_against_a_local_openai_compatible_server"
PAGE = ROOT / "docs" / "coding-agent.md"
DOCS_MODEL_PORT = "8765"
# The explore subagent's model calls (glob, grep, its answer: policy.py's _explore), in a
# session of its own: not in the coder's history, but requests all the same.
EXPLORE_CALLS = 3
# What picks a model: the commands choose, not the machine the test runs on.
MODEL_CHOOSERS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "FXD_CODING_MODEL")


def commands(page: Path, test_id: str) -> list[str]:
    """The command lines of ``page``'s block marked as tested by ``test_id``."""
    marked = [b for b in blocks(page) if b.mark == "tested" and b.what == test_id]
    assert len(marked) == 1, f"{page.name} has not one block marked tested: {test_id}"
    return [ln for ln in marked[0].body.splitlines() if ln.strip() and not ln.startswith("#")]


@contextmanager
def terminal(
    line: str, cwd: Path, env: dict[str, str], log: Path, *, pipe: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """``line`` run by bash in a process group of its own (make, the server and its worker
    under it), as typed into a terminal, its output to ``log`` (stdout to a pipe the test
    reads with ``pipe``); killed with its group at the end."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            ["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE if pipe else out,
            stderr=out, start_new_session=True,
        )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def terminal_env(ui_port: int) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("FXD_") and k not in MODEL_CHOOSERS
    }
    return env | {"ARGS": f"--port {ui_port}", "FXD_CODING_PACE_S": "0"}


def fix_the_failing_tests(
    page: Page, ui: subprocess.Popen[bytes], log: Path, ui_port: int, shots: Shots
) -> dict[str, Any]:
    """Open what the docs say to open, ask the task in a new session, allow each shell
    command, wait for the turn to complete; the session's history."""
    url = f"http://127.0.0.1:{ui_port}"
    wait_healthy(f"{url}/healthz", ui, timeout_s=60, output=log.read_text)
    page.goto(f"{url}/")  # it leads to the console
    expect(page.get_by_role("heading", name="Sessions", exact=True)).to_be_visible()
    assert page.url == f"{url}/console/", page.url
    page.goto(f"{url}/console/#/sessions/fix")
    expect(page.get_by_test_id("files-panel")).to_be_visible()
    send(page, TASK)
    assert allow_until_done(page) == 2  # the tests before and after the fixes
    expect(tool_call(page, "edit_file")).to_have_count(2)
    last_run = tool_call(page, "shell").last.get_by_test_id("exit-status")
    expect(last_run).to_contain_text("exit 0")
    shots.take("completed")
    history: dict[str, Any] = page.request.get(f"{url}/sessions/fix/history").json()
    return history


def project_tests_pass(repo: Path) -> None:
    done = run_project_tests(repo / ".fxd-coding" / "workspace" / safe_name("dev/fix"))
    assert done.returncode == 0, done.stderr


def test_make_coding_ui_in_a_checkout_fixes_the_failing_tests(
    page: Page, tmp_path: Path, shots: Shots
) -> None:
    (line,) = commands(README, MAKE_TEST)
    (same,) = commands(PAGE, MAKE_TEST)
    assert (
        shlex.split(line, comments=True)
        == shlex.split(same, comments=True)
        == ["make", "coding-ui"]
    )
    repo = checkout(tmp_path)
    ui_port = free_port()
    log = tmp_path / "coding-ui.log"
    with terminal(line, repo, terminal_env(ui_port), log) as ui:
        fix_the_failing_tests(page, ui, log, ui_port, shots)
    project_tests_pass(repo)
    assert "demo worker: model endpoints: none (no HTTP provider model: scripted/coder)" in (
        log.read_text()
    ), log.read_text()[-3000:]


def test_the_page_against_a_local_openai_compatible_server(
    page: Page, tmp_path: Path, shots: Shots
) -> None:
    repo = checkout(tmp_path)
    model_port, ui_port = str(free_port()), free_port()
    serve_model, coding_ui = [
        line.replace(DOCS_MODEL_PORT, model_port) for line in commands(PAGE, LOCAL_SERVER_TEST)
    ]
    assert "fxdurable.testing.model_server" in serve_model and "--policy" in serve_model
    base = f"http://127.0.0.1:{model_port}/v1"
    assert "make coding-ui" in coding_ui and f"OPENAI_BASE_URL={base} " in coding_ui
    env = terminal_env(ui_port)
    server_log, ui_log = tmp_path / "model-server.log", tmp_path / "coding-ui.log"
    with terminal(serve_model, repo, env, server_log, pipe=True) as model_server:
        assert model_server.stdout is not None
        said = model_server.stdout.readline().decode()  # "OpenAI:    http://.../chat/..."
        assert said.split() == ["OpenAI:", f"{base}/chat/completions"], server_log.read_text()
        with terminal(coding_ui, repo, env, ui_log) as ui:
            history = fix_the_failing_tests(page, ui, ui_log, ui_port, shots)
    project_tests_pass(repo)

    # The worker called the server OPENAI_BASE_URL names, and said so at startup.
    startup = f"demo worker: model endpoints: openai {base} (from OPENAI_BASE_URL; key from"
    assert startup in ui_log.read_text(), ui_log.read_text()[-3000:]
    # Each of the coder's model calls (and its explore subagent's) reached the server.
    log = repo / ".fxd-coding" / "model-requests.jsonl"
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    assert {(r["path"], r["model"]) for r in requests} == {
        ("/v1/chat/completions", "scripted-coder")
    }
    answers = [m for m in history["messages"] if m["role"] == "assistant"]
    assert len(requests) == len(answers) + EXPLORE_CALLS, (len(requests), len(answers))
