"""Processes for the MCP tests: the driver (a worker running one session), the test server
over HTTP, and the waits and reads the tests share. Every wait is on a condition (a file, a
port, an exit) with a deadline, never a bare sleep."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DRIVER = HERE / "mcp_driver.py"
SERVER = HERE / "mcp_server.py"
DEADLINE_S = 60.0


def env(crash_at: str | None = None) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), clean.get("PYTHONPATH")]))
    clean["PYTHONUNBUFFERED"] = "1"
    if crash_at is not None:
        clean["FXD_CRASH_AT"] = crash_at
    return clean


def driver_argv(store: str, world: Path, script: str, http: int | None = None) -> list[str]:
    argv = [sys.executable, str(DRIVER), "--store", store, "--world", str(world)]
    argv += ["--script", script]
    return argv + (["--http", str(http)] if http is not None else [])


def start_driver(
    store: str, world: Path, script: str, *, http: int | None = None, crash_at: str | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        driver_argv(store, world, script, http),
        cwd=REPO,
        env=env(crash_at),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the driver hung\nstdout:\n{out}\nstderr:\n{err}") from None
    return proc.returncode, out, err


def run_clean(store: str, world: Path, script: str, *, http: int | None = None) -> list[dict]:
    """Run the driver to rest; its tool events (the JSON lines it printed)."""
    code, out, err = finish(start_driver(store, world, script, http=http))
    assert code == 0, f"driver exited {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in err, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def wait_for(what: str, condition: Callable[[], bool], proc: subprocess.Popen[str] | None = None):
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"exited {proc.returncode} before {what}\n{out}\n{err}")
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S:g}s"
        time.sleep(0.02)


def blocked_pid(world: Path, tool: str, proc: subprocess.Popen[str] | None = None) -> int:
    """Wait until the server's ``tool`` is mid-call (its effect done, its answer not sent)."""
    marker = world / f"blocked-{tool}"
    wait_for(f"{tool} mid-call", lambda: marker.exists() and marker.read_text() != "", proc)
    return int(marker.read_text())


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
        os.kill(pid, signal.SIGKILL)


def lines(world: Path, name: str) -> list[str]:
    path = world / name
    return path.read_text().splitlines() if path.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http_server(
    world: Path, port: int, command: Sequence[str] | None = None
) -> subprocess.Popen[str]:
    """A streamable-HTTP MCP server on ``port``, once it listens: ``mcp_server.py``, or the
    server ``command`` starts (run by this venv's python)."""
    argv = [str(SERVER), str(world), "--http", str(port)] if command is None else command
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=REPO,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(f"the MCP server on port {port}", listening, proc)
    return proc


def check(store: str) -> tuple[int, str]:
    """``fxdurable check --at-rest``: its exit code and output."""
    done = subprocess.run(
        [sys.executable, "-m", "fxdurable", "check", "--store", store, "--at-rest"],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr
