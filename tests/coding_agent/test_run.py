"""``examples/coding_agent/run.py`` as a user runs it: a real process on the embedded store,
the scripted model served over HTTP to the real OpenAI client, the workspace on disk; killed
with SIGKILL at a crash point and run again; answered on a terminal; and the docs page's
walkthrough, command for command."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkout_support import checkout
from coding_support import (
    FIXED,
    PAGE,
    RUN,
    assert_at_rest_invariants,
    assert_cart_fixed_once,
    audit,
    cart,
    clean_env,
    project_tests_pass,
    read_db,
    readme_sh_block,
    run,
)

from examples.coding_agent.policy import coding_policy
from fxdurable.testing.model_server import ScriptedModelServer


def test_yes_fixes_the_tests_past_a_refusal_and_the_permission_prompts(tmp_path: Path) -> None:
    where = tmp_path / ".fxd-coding"
    done = run(where, "--yes")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "model: scripted policy, served as OpenAI streams" in out
    assert "tool read_file r1.t0 failed: PathRefusedError" in out
    assert "`../pyproject.toml` is outside the workspace and was refused" in out
    prompt = "asks a person (about shell r3.t0): Run `python3 -m unittest -q` in the workspace?"
    assert prompt in out
    assert "yes (approved: --yes)" in out
    assert "Its tests, run by this script: Ran 6 tests" in out
    assert f"Trace: fxdurable trace coder --db {where / 'coding.db'}" in out
    assert re.search(r"its explore subagent's turn: fxdurable trace sub-x[0-9a-f]+ --db", out)
    assert project_tests_pass(where)
    assert "every invariant holds" in audit(where)
    again = run(where)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already finished its task" in again.stdout


@pytest.mark.parametrize(
    ("point", "applied_before_the_crash", "recovered"),
    [
        # The edit's intent is recorded and it has not run: recovery runs it, for the first time.
        (
            "tool.after-intent:edit_file",
            0,
            "completed: edited shop/cart.py: replaced 1 occurrence\n",
        ),
        # It ran and its result was not recorded: recovery finds it applied (the ledger).
        ("tool.after-execute:edit_file", 1, "(already applied; not applied again)"),
    ],
    ids=["after-intent", "after-execute"],
)
def test_killed_mid_edit_the_next_run_finishes_with_each_fix_applied_once(
    tmp_path: Path, point: str, applied_before_the_crash: int, recovered: str
) -> None:
    where = tmp_path / ".fxd-coding"
    crashed = run(where, "--crash-at", point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert f"crash injected at {point}" in crashed.stderr
    assert cart(where).count(FIXED[0]) == applied_before_the_crash
    (edit,) = read_db(
        where, lambda v: [t for t in v.session_tool_tasks("coder") if t.tool == "edit_file"]
    )
    assert (edit.status, edit.runs) == ("running", 1)  # its intent, and no result
    audit(where)  # the store a SIGKILL left is consistent before anything recovers it
    done = run(where)  # stdin is not a terminal: approved, and said so
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Recovering session 'coder': 1 unfinished turn(s)" in out
    assert recovered in out
    assert out.count("(already applied; not applied again)") == applied_before_the_crash
    assert "yes (approved: stdin is not a terminal)" in out
    assert "Its tests, run by this script: Ran 6 tests" in out
    assert project_tests_pass(where)
    assert_cart_fixed_once(where)
    assert_at_rest_invariants(where)


def test_on_a_terminal_it_asks_and_a_no_is_the_models_to_read(tmp_path: Path) -> None:
    """y/n at the prompt; "n" denies the test run, and the model stops there."""
    where = tmp_path / ".fxd-coding"
    pid, fd = pty.fork()
    if pid == 0:  # the child: run.py on the terminal
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, str(RUN), "--dir", str(where)], clean_env())
    out, answered = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the terminal closed: the child exited
                break
            if not chunk:
                break
            out += chunk
            if not answered and b"[y/n]" in out:
                os.write(fd, b"n\n")
                answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.decode(errors="replace"))
    assert "Run `python3 -m unittest -q` in the workspace? [y/n]" in text, text
    assert "answered deny: the user said no" in text, text
    assert "I was not allowed to run the tests" in text, text
    assert os.waitstatus_to_exitcode(status) == 1  # completed, but the project's tests fail
    assert not project_tests_pass(where)


def test_an_openai_compatible_server_without_a_key_needs_the_model_named(tmp_path: Path) -> None:
    """OPENAI_BASE_URL without a key is a local server (Ollama): the model name is required,
    and with it the agent runs against that server (here, the scripted one)."""
    where = tmp_path / ".fxd-coding"
    refused = run(where, OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert refused.returncode == 2
    assert "name the model the server runs in FXD_CODING_MODEL" in refused.stderr
    with ScriptedModelServer(coding_policy) as server:
        base_url = server.openai_base_url
        done = run(where, "--yes", OPENAI_BASE_URL=base_url, FXD_CODING_MODEL="local")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"model: local at {base_url} (OPENAI_BASE_URL)" in done.stdout
    assert project_tests_pass(where)


def _scoped_pgrep(repo: Path) -> Path:
    """A directory holding a ``pgrep`` that answers the real one's pids narrowed to processes
    working in ``repo``: the docs page's ``kill -9 $(pgrep -f coding_agent/run.py)``, run
    verbatim, must not kill the run.py of a test running beside this one (pytest -n) or
    anyone else's on the machine; it did, as an unexplained SIGKILL of other tests' runs."""
    real = shutil.which("pgrep")
    assert real, "the docs page's kill line needs pgrep"
    where = repo / ".scoped-bin"
    where.mkdir()
    top = os.path.realpath(repo)
    (where / "pgrep").write_text(
        "#!/bin/sh\n"
        f'for pid in $({real} "$@"); do\n'
        f'  case "$(readlink /proc/$pid/cwd)" in "{top}"|"{top}"/*) echo "$pid";; esac\n'
        "done\n"
    )
    (where / "pgrep").chmod(0o755)
    return where


def test_readme_coding_agent_walkthrough_runs_verbatim(tmp_path: Path) -> None:
    """The coding agent page's commands, as a newcomer pastes them: the clean run, the crash
    point and the resumed run, the checks; then a ``kill -9`` from another terminal mid-run."""
    repo = checkout(tmp_path)

    scoped = _scoped_pgrep(repo)

    def sh(script: str) -> subprocess.CompletedProcess[str]:
        # From a file: ``pgrep -f`` must not find the pattern in this shell's own arguments.
        (repo / "step.sh").write_text(script)
        return subprocess.run(
            ["bash", "step.sh"],
            cwd=repo,
            env=clean_env(PATH=f"{scoped}{os.pathsep}{os.environ['PATH']}"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
        )

    first = sh(readme_sh_block(0))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Its tests, run by this script: Ran 6 tests" in first.stdout
    lines = [ln for ln in readme_sh_block(1).splitlines() if not ln.startswith("#")]
    outputs = [sh(line) for line in lines]
    crash, resumed = outputs[1], outputs[2]
    assert crash.returncode != 0 and "crash injected at" in crash.stderr, crash.stderr
    assert "Killed" in crash.stderr, crash.stderr  # make's own account of it
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "(already applied; not applied again)" in resumed.stdout
    assert [o.stdout.strip() for o in outputs[3:4]] == ["1"]
    assert all(o.returncode == 0 for o in outputs[3:]), [o.stderr for o in outputs[3:]]
    assert "every invariant holds" in outputs[5].stdout

    # kill -9 from another terminal, while a --slow run streams; then run it again.
    kill = re.search(r"`(kill -9 \$\(pgrep -f [^)]+\))`", PAGE.read_text())
    assert kill, "docs/coding-agent.md lost its kill -9 line"
    sh("rm -rf .fxd-coding")
    with subprocess.Popen(
        ["make", "coding-demo", "ARGS=--slow"],
        cwd=repo,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as slow:
        assert slow.stdout is not None
        for line in slow.stdout:
            if "tool explore r0.t0 running" in line:  # its subagent is at work
                break
        assert sh(kill.group(1)).returncode == 0
        rest = slow.stdout.read()
        assert slow.wait(timeout=30) != 0, rest
    assert "turn completed" not in rest
    again = sh("make coding-demo")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Recovering session 'coder'" in again.stdout
    assert "Its tests, run by this script: Ran 6 tests" in again.stdout
