"""The shell tool in real processes: exit codes, the output cap, the timeout that kills the
whole process group, a scrubbed environment with HOME and cwd at the workspace, progress as
output arrives, and a SIGKILLed worker whose command dies with it, whatever it started
(PR_SET_PDEATHSIG and a supervisor)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ws_support import call, context, gone, kill_quietly, pids_in, wait_until

from fxdurable import tools as fxt

CREDENTIALS = {
    "FOO_API_KEY": "k1",
    "GH_TOKEN": "k2",
    "MY_SECRET_X": "k3",
    "AWS_ACCESS_KEY_ID": "k4",
    "FXD_STORE_URL": "redis://:k5@host/0",
    "DB_PASSWORD": "k6",
    # Named like nothing secret, but its value carries a password.
    "DATABASE_URL": "postgres://app:k7@db.internal:5432/app",
}


@pytest.fixture
def ws(tmp_path: Path) -> fxt.DirectoryWorkspace:
    return fxt.directory(tmp_path / "ws")


def shell(ws, command: str, **options) -> str:
    return call(fxt.shell_tool(ws, **options), command=command)


def test_the_answer_starts_with_the_exit_code_and_holds_stdout_and_stderr(ws):
    assert shell(ws, "echo out; echo err >&2; exit 3") == "exit code: 3\nout\nerr\n"
    assert shell(ws, "kill -9 $$") == "exit code: -9 (killed by SIGKILL)\n"


def test_without_an_interpreter_executable_the_shell_runs_without_its_supervisor(ws, monkeypatch):
    """An embedded Python (``sys.executable`` empty) cannot start the supervisor: the shell
    is the worker's direct child then, and still runs."""
    monkeypatch.setattr("sys.executable", "")
    assert shell(ws, "echo $PPID; echo hi").endswith(f"{os.getpid()}\nhi\n")


def test_the_output_is_tail_capped_with_a_note(ws):
    answer = shell(ws, "seq 1 5000", output_limit=100)
    head, note, rest = answer.split("\n", 2)
    assert head == "exit code: 0"
    full = "".join(f"{n}\n" for n in range(1, 5001))
    assert note == f"[... {len(full) - 100} characters cut ...]"
    assert rest == full[-100:]


def test_a_timeout_kills_the_whole_process_group(ws, tmp_path):
    pids = tmp_path / "ws" / "s1" / "pids"
    command = "sleep 100 & echo $! > pids; sh -c 'echo $$ >> pids; exec sleep 100'"
    try:
        answer = call(fxt.shell_tool(ws), command=command, timeout_s=0.5)
        assert answer == "timed out after 0.5s; the command's process group was killed\n"
        started = pids_in(pids)
        assert len(started) == 2
        wait_until(lambda: all(gone(pid) for pid in started), "both sleeps killed")
    finally:
        kill_quietly(pids_in(pids))


def test_background_processes_do_not_outlive_the_command(ws, tmp_path):
    pids = tmp_path / "ws" / "s1" / "pids"
    try:
        assert shell(ws, "sleep 100 > /dev/null & echo $! > pids") == "exit code: 0\n"
        [pid] = pids_in(pids)
        wait_until(lambda: gone(pid), "the background sleep killed")
    finally:
        kill_quietly(pids_in(pids))


def test_credentials_are_stripped_and_home_and_cwd_are_the_workspace(ws, tmp_path, monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "ws" / "s1"
    answer = shell(ws, "pwd; echo HOME=$HOME; env")
    lines = answer.splitlines()
    assert lines[:3] == ["exit code: 0", str(home), f"HOME={home}"]
    names = {line.split("=", 1)[0] for line in lines[3:] if "=" in line}
    assert not names & set(CREDENTIALS), names & set(CREDENTIALS)
    assert f"PATH={os.environ['PATH']}" in lines
    # Wandering off: the rest of the file system is there, the credentials are not.
    wandered = shell(
        ws, "cd ../.. && ls && env | grep -c -e k1 -e k2 -e k3 -e k4 -e k5 -e k6 -e k7"
    )
    assert "ws" in wandered.splitlines() and wandered.endswith("\n0\n")


def test_output_is_reported_as_progress_while_it_runs(ws):
    reports: list[str] = []
    answer = call(fxt.shell_tool(ws), context(report=reports.append), command="echo a; echo b")
    assert "".join(reports) == "a\nb\n" and answer == "exit code: 0\na\nb\n"


def test_a_per_call_timeout_is_capped_by_the_tools(ws):
    tool = fxt.shell_tool(ws, timeout_s=0.3)
    assert call(tool, command="sleep 5", timeout_s=60).startswith("timed out after 0.3s")


WORKER = """
import asyncio, sys
from fxdurable import tools as fxt
from fxdurable.runtime.tools import ToolContext

ws = fxt.directory(sys.argv[1])
tool = fxt.shell_tool(ws)
ctx = ToolContext(execution_id="x1", session_id="s1", tool_name="shell", attempt=1)
asyncio.run(tool.run(tool.input_model(command=sys.argv[2]), ctx))
"""


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("echo $$ > child.pid; exec sleep 100", id="the-shell-itself"),
        # What a test runner's wrapper script, a pipeline or `cd x && make` leaves: processes
        # the command's shell started, which PR_SET_PDEATHSIG alone does not reach.
        pytest.param("sleep 100 & echo $! > child.pid; wait", id="a-process-it-started"),
    ],
)
def test_a_sigkilled_worker_leaves_nothing_of_its_command_running(tmp_path, command):
    """The kernel tells the command's supervisor (the shell's direct child) when the worker
    dies (PR_SET_PDEATHSIG), and it kills the command's whole process group."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(WORKER))
    worker = subprocess.Popen([sys.executable, str(script), str(tmp_path / "ws"), command])
    pidfile = tmp_path / "ws" / "s1" / "child.pid"
    try:
        wait_until(lambda: len(pids_in(pidfile)) == 1, "the shell started")
        [child] = pids_in(pidfile)
        assert not gone(child)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        wait_until(lambda: gone(child), "the shell's child killed with its worker")
    finally:
        worker.kill()
        worker.wait()
        kill_quietly(pids_in(pidfile))
