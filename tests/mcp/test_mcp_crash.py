"""Killing the worker, or the MCP server, in the middle of an MCP tool call.

The worker is ``tests/mcp/mcp_driver.py`` (a real process running session ``s`` on SQLite);
the server is ``tests/mcp/mcp_server.py`` (FastMCP), started by the worker over stdio or by
the test over streamable HTTP. A blocked tool has done its effect and not yet answered
(``mcp_support.blocked_pid``): the moment where only "unknown" is honest. After each run
``fxdurable check --at-rest`` must be clean.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mcp.mcp_support import (
    blocked_pid,
    check,
    finish,
    free_port,
    kill,
    lines,
    run_clean,
    start_driver,
    start_http_server,
)

pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path.resolve()}/mcp.db"


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest, world: Path) -> Iterator[int | None]:
    """None for stdio (the worker starts the server), else the port of an HTTP server that
    the test started (and stops)."""
    if request.param == "stdio":
        yield None
        return
    port = free_port()
    server = start_http_server(world, port)
    try:
        yield port
    finally:
        server.kill()
        server.wait()


def events_of(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def outcome(events: list[dict], tool: str) -> tuple[str, str]:
    found = [(e["type"], e["result"]) for e in events if e["tool"] == tool]
    assert len(found) == 1, events
    return found[0]


def assert_checked(store: str) -> None:
    code, out = check(store)
    assert code == 0, out


def assert_unknown(events: list[dict], tool: str) -> None:
    kind, result = outcome(events, tool)
    assert kind == "tool.outcome_unknown", (kind, result)
    assert "may or may not have completed" in result, result


@pytest.mark.parametrize("crash_at", ["tool.after-intent:deploy", "tool.after-execute:deploy"])
def test_a_worker_killed_at_a_crash_point_leaves_the_deploy_unknown(
    store: str, world: Path, crash_at: str
) -> None:
    proc = start_driver(store, world, "deploy", crash_at=crash_at)
    code, _, err = finish(proc)
    assert code == -signal.SIGKILL and f"crash injected at {crash_at}" in err, err
    events = run_clean(store, world, "deploy")
    assert_unknown(events, "deploy")
    sent = 0 if crash_at.startswith("tool.after-intent") else 1
    assert len(lines(world, "effects.log")) == sent  # never sent again
    assert_checked(store)


def test_a_worker_killed_mid_call_leaves_the_deploy_unknown_and_done_once(
    store: str, world: Path, transport: int | None
) -> None:
    (world / "block-deploy").touch()
    worker = start_driver(store, world, "deploy", http=transport)
    server_pid = blocked_pid(world, "deploy", worker)
    worker.send_signal(signal.SIGKILL)
    assert finish(worker)[0] == -signal.SIGKILL
    if transport is None:
        kill(server_pid)  # the worker's stdio server, orphaned mid-call
    events = run_clean(store, world, "deploy", http=transport)
    assert_unknown(events, "deploy")
    assert len(lines(world, "effects.log")) == 1, lines(world, "effects.log")
    assert_checked(store)
    # The session takes the next message (the read), and the store is still clean.
    (world / "block-deploy").unlink()
    after = run_clean(store, world, "read", http=transport)
    assert outcome(after, "read_status")[0] == "tool.completed"
    assert_checked(store)


def restart_server(world: Path, transport: int | None, pid: int) -> subprocess.Popen[str] | None:
    """Kill the server mid-call; over HTTP start a new one on the same port (the worker
    reconnects to it), over stdio the worker starts one itself."""
    kill(pid)
    if transport is None:
        return None
    return start_http_server(world, transport)


def test_a_server_killed_mid_call_leaves_an_unsafe_call_unknown(
    store: str, world: Path, transport: int | None
) -> None:
    (world / "block-deploy").touch()
    worker = start_driver(store, world, "deploy", http=transport)
    pid = blocked_pid(world, "deploy", worker)
    kill(pid)
    code, out, err = finish(worker)
    assert code == 0, err
    assert out.splitlines()[0] == "done"
    kind, result = outcome(events_of(out), "deploy")
    assert kind == "tool.outcome_unknown", (kind, result)
    assert "lost the MCP server" in result or "no answer" in result, result
    assert len(lines(world, "effects.log")) == 1
    assert_checked(store)


@pytest.mark.parametrize(("script", "tool"), [("read", "read_status"), ("flag", "set_flag")])
def test_a_server_killed_mid_call_reruns_a_safe_or_idempotent_call(
    store: str, world: Path, transport: int | None, script: str, tool: str
) -> None:
    (world / f"block-{tool}").touch()
    worker = start_driver(store, world, script, http=transport)
    restarted = restart_server(world, transport, blocked_pid(world, tool, worker))
    try:
        code, out, err = finish(worker)
    finally:
        if restarted is not None:
            restarted.kill()
            restarted.wait()
    assert code == 0, err
    assert outcome(events_of(out), tool)[0] == "tool.completed", out
    calls = [line.split()[1] for line in lines(world, "calls.log") if line.startswith(tool)]
    assert len(calls) == 2 and calls[0] == calls[1], calls  # re-run with the same execution id
    if tool == "set_flag":
        assert lines(world, "flags.log") == calls[:1]  # the server deduplicated the re-run
    assert_checked(store)


def test_a_tool_gone_after_a_redeploy_fails_naming_it(store: str, world: Path) -> None:
    """The model asked for deploy, the worker died before its intent; the server and worker
    are redeployed without deploy: the recovered call fails naming it, nothing was sent."""
    crash_at = "model.after-finish"
    code, _, err = finish(start_driver(store, world, "deploy", crash_at=crash_at))
    assert code == -signal.SIGKILL and f"crash injected at {crash_at}" in err, err
    (world / "hidden").write_text("deploy\n")
    kind, result = outcome(run_clean(store, world, "deploy"), "deploy")
    assert kind == "tool.failed" and "unknown tool 'deploy'" in result, (kind, result)
    assert lines(world, "effects.log") == []
    assert_checked(store)


def test_a_recovered_call_of_a_tool_changed_by_a_redeploy_fails_naming_it(
    store: str, world: Path
) -> None:
    """The session pinned the list (a read completed); in its next turn the model asked for
    set_flag and the worker died before the call's intent. The server and the worker are
    redeployed with set_flag's annotations changed (no longer idempotent): the recovered call
    fails naming it, and nothing was sent."""
    assert outcome(run_clean(store, world, "read"), "read_status")[0] == "tool.completed"
    crash_at = "model.after-finish"
    code, _, err = finish(start_driver(store, world, "flag", crash_at=crash_at))
    assert code == -signal.SIGKILL and f"crash injected at {crash_at}" in err, err
    (world / "reannotated").touch()
    events = run_clean(store, world, "flag")
    kind, result = outcome([e for e in events if e["tool"] == "set_flag"], "set_flag")
    assert kind == "tool.failed", (kind, result)
    assert "MCPToolChangedError" in result and "the tool 'set_flag'" in result, result
    assert not [line for line in lines(world, "calls.log") if line.startswith("set_flag")]
    assert_checked(store)
