"""The ``fxdurable`` command as a user runs it: real subprocesses in scratch directories.

Every command runs with stdout and stderr piped (not a TTY), which is also how the tests check
that no ANSI colour codes leak into logs and pipes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from fxdurable import __version__
from fxdurable.backends import open_store
from fxdurable.core.crash import CRASH_POINTS
from fxdurable.http.scoping import session_key
from fxdurable.testing.net import free_port, wait_healthy

ANSI = re.compile(r"\x1b\[")
VIOLATION = re.compile(r"^[a-z-]+: session \S+: .+$")


def fxd(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FXD_CRASH_AT", "NO_COLOR")}
    proc = subprocess.run(
        [sys.executable, "-m", "fxdurable", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        assert not ANSI.search(stream), f"ANSI escape in {name} of a non-TTY run:\n{stream!r}"
    return proc


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean demo run, shared read-only: tests that change it work on a copy."""
    cwd = tmp_path_factory.mktemp("demo")
    proc = fxd("demo", "--dir", "d", cwd=cwd)
    assert proc.returncode == 0, explain(proc)
    return cwd / "d"


@pytest.fixture
def demo_copy(demo_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "d"
    shutil.copytree(demo_dir, copy)
    return copy


def test_version(tmp_path: Path) -> None:
    proc = fxd("--version", cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.strip() == f"fxdurable {__version__}"


def test_demo_clean_run_completes(tmp_path: Path) -> None:
    proc = fxd("demo", "--dir", "d", cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert "Outcome: completed" in proc.stdout, explain(proc)
    assert "tool deploy r1.t0 completed" in proc.stdout, explain(proc)
    assert (tmp_path / "d" / "demo.db").is_file()
    deploys = (tmp_path / "d" / "deployments.log").read_text().splitlines()
    assert len(deploys) == 1, deploys


def test_second_demo_sends_the_follow_up(demo_copy: Path) -> None:
    proc = fxd("demo", "--dir", str(demo_copy), cwd=demo_copy.parent)
    assert proc.returncode == 0, explain(proc)
    assert "sending a follow-up message" in proc.stdout, explain(proc)
    assert "you: Is release 1.4 live in production?" in proc.stdout, explain(proc)
    assert "check_deployment" in proc.stdout, explain(proc)
    assert "Outcome: completed" in proc.stdout, explain(proc)
    assert "Ship release" not in proc.stdout, "the first story ran again:\n" + proc.stdout
    # The follow-up only looks at production: still exactly one deploy on record.
    assert len((demo_copy / "deployments.log").read_text().splitlines()) == 1
    check = fxd("check", "--db", str(demo_copy / "demo.db"), "--at-rest", cwd=demo_copy.parent)
    assert check.returncode == 0, explain(check)
    assert check.stdout.startswith("ok: 1 sessions, 2 submissions, 3 tool tasks"), explain(check)


def test_demo_rejects_an_unknown_crash_point(tmp_path: Path) -> None:
    proc = fxd("demo", "--crash-at", "not.a.point", "--dir", "d", cwd=tmp_path)
    assert proc.returncode == 2, explain(proc)
    assert "names no crash point 'not.a.point'" in proc.stderr, explain(proc)
    for point in CRASH_POINTS:
        assert point in proc.stderr, f"valid point {point} not listed:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, explain(proc)
    assert not (tmp_path / "d").exists(), "a refused demo still created its directory"


def test_trace_prints_the_timeline(demo_dir: Path, tmp_path: Path) -> None:
    proc = fxd("trace", "engineer", "--db", str(demo_dir / "demo.db"), cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("session engineer  agent=engineer status=idle lease=free")
    assert any("tool deploy r1.t0 completed" in line for line in lines), explain(proc)
    assert re.search(r"^submission \S+: completed after 1 attempt\(s\)", proc.stdout, re.M)


def test_trace_into_a_closed_pipe_exits_quietly(demo_dir: Path, tmp_path: Path) -> None:
    """``fxdurable trace ... | head``: the reader goes away after a few lines, and the trace
    stops there, with the shell's exit status for SIGPIPE and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that has already gone: the first write fails
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "fxdurable",
                "trace",
                "engineer",
                "--db",
                str(demo_dir / "demo.db"),
            ],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 128 + signal.SIGPIPE, proc.stderr
    assert proc.stderr == "", proc.stderr


def test_trace_unknown_session_exits_2(demo_dir: Path, tmp_path: Path) -> None:
    proc = fxd("trace", "nobody", "--db", str(demo_dir / "demo.db"), cwd=tmp_path)
    assert proc.returncode == 2, explain(proc)
    assert "no session 'nobody'" in proc.stderr, explain(proc)
    assert "engineer" in proc.stderr, "the message should name the sessions that exist"
    assert proc.stdout == "", explain(proc)


@pytest.mark.parametrize("command", [["trace", "engineer"], ["check"]])
def test_missing_db_exits_2_and_creates_nothing(command: list[str], tmp_path: Path) -> None:
    proc = fxd(*command, "--db", "missing.db", cwd=tmp_path)
    assert proc.returncode == 2, explain(proc)
    assert "no fxdurable store at" in proc.stderr and "missing.db" in proc.stderr, explain(proc)
    assert "Traceback" not in proc.stderr, explain(proc)
    assert list(tmp_path.iterdir()) == [], "a read-only command created files"


def test_missing_store_url_is_refused_too(tmp_path: Path) -> None:
    proc = fxd("check", "--store", "sqlite:///typo.db", cwd=tmp_path)
    assert proc.returncode == 2, explain(proc)
    assert list(tmp_path.iterdir()) == [], "a read-only command created files"


def test_check_on_a_foreign_sqlite_file_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "other-app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    proc = fxd("check", "--db", str(db), cwd=tmp_path)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    conn.close()
    tables = [name for (name,) in rows]
    assert tables == ["invoices"], f"a read-only command changed another app's database: {tables}"
    assert proc.returncode == 2, explain(proc)


def test_check_healthy_db(demo_dir: Path, tmp_path: Path) -> None:
    proc = fxd("check", "--db", str(demo_dir / "demo.db"), cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, explain(proc)
    assert lines[0] == (
        "ok: 1 sessions, 1 submissions, 2 tool tasks, 12 events; every invariant holds"
    ), explain(proc)


def _delete_an_event(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        # A bookkeeping event: only the sequence itself can notice it is gone.
        deleted = conn.execute(
            "DELETE FROM events WHERE json_extract(data, '$.type') = 'attempt.started'"
        ).rowcount
    assert deleted == 1
    return {"event-gap", "event-cursor"}


def _task_back_to_running(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        changed = conn.execute(
            "UPDATE tool_tasks SET data = json_set(data, '$.status', 'running') "
            "WHERE json_extract(data, '$.tool') = 'deploy'"
        ).rowcount
    assert changed == 1
    return {"task-left-running"}


@pytest.mark.parametrize("tamper", [_delete_an_event, _task_back_to_running])
def test_check_tampered_db_lists_each_violation(
    tamper: Callable[[Path], set[str]], demo_copy: Path
) -> None:
    db = demo_copy / "demo.db"
    expected = tamper(db)
    proc = fxd("check", "--db", str(db), cwd=demo_copy.parent)
    assert proc.returncode == 1, explain(proc)
    *violations, summary = proc.stdout.splitlines()
    assert summary == f"{len(violations)} invariant violation(s) in sqlite:///{db.resolve()}"
    for line in violations:
        assert VIOLATION.match(line), f"not one violation per line: {line!r}"
    assert {line.split(":", 1)[0] for line in violations} == expected, explain(proc)
    assert len(violations) == len(expected), explain(proc)


def test_check_blobs_reports_a_blob_no_session_names(demo_copy: Path) -> None:
    db = demo_copy / "demo.db"
    proc = fxd("check", "--db", str(db), "--blobs", cwd=demo_copy.parent)
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.endswith(" events, 0 blobs; every invariant holds\n"), explain(proc)
    store = open_store(f"sqlite:///{db}", create=False)
    try:
        orphan = store.put_blob(b"put by a process killed before its commit")
    finally:
        store.close()
    assert fxd("check", "--db", str(db), cwd=demo_copy.parent).returncode == 0  # opt-in
    proc = fxd("check", "--db", str(db), "--blobs", cwd=demo_copy.parent)
    assert proc.returncode == 1, explain(proc)
    violation, summary = proc.stdout.splitlines()
    assert VIOLATION.match(violation), explain(proc)
    assert violation.startswith(f"blob-unreferenced: session *: blob {orphan} "), explain(proc)
    assert summary == f"1 invariant violation(s) in sqlite:///{db.resolve()}", explain(proc)


def test_demo_says_when_its_crash_point_was_never_reached(tmp_path: Path) -> None:
    proc = fxd("demo", "--crash-at", "continuation.before-enqueue", cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert "crash point continuation.before-enqueue was never reached" in proc.stderr
    assert "--invocation-budget" in proc.stderr


def test_demo_sigterm_stops_at_a_boundary_and_the_next_run_finishes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FXD_CRASH_AT", "NO_COLOR")}
    first = subprocess.Popen(
        [sys.executable, "-m", "fxdurable", "demo"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None
    for line in first.stdout:  # stop it once a step is under way, not before it started
        if "tool run_tests r0.t0 running" in line:
            first.send_signal(signal.SIGTERM)
            break
    out, err = first.communicate(timeout=60)
    assert first.returncode == 3, f"exit {first.returncode}\n{out}\n{err}"
    assert "Stopped at a step boundary" in out
    again = fxd("demo", cwd=tmp_path)
    assert again.returncode == 0, explain(again)
    assert "Outcome: completed" in again.stdout
    assert "interrupted" not in again.stdout, "a graceful stop is not a crash"
    check = fxd("check", "--db", ".fxd-demo/demo.db", "--at-rest", cwd=tmp_path)
    assert check.returncode == 0, explain(check)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_demo_walkthrough_over_a_provider_wire_format(provider: str, tmp_path: Path) -> None:
    """The crash story through the real httpx client and a local wire-format server."""
    crashed = fxd(
        "demo", "--provider", provider, "--crash-at", "tool.after-execute:deploy", cwd=tmp_path
    )
    assert crashed.returncode == -signal.SIGKILL, explain(crashed)
    assert f"served as {provider} streams" in crashed.stdout
    recovered = fxd("demo", "--provider", provider, cwd=tmp_path)
    assert recovered.returncode == 0, explain(recovered)
    assert "Outcome unknown" in recovered.stdout and "NOT be replayed" in recovered.stdout
    assert "Traceback" not in recovered.stderr, explain(recovered)
    deploys = (tmp_path / ".fxd-demo" / "deployments.log").read_text().splitlines()
    assert len(deploys) == 1
    check = fxd("check", "--db", ".fxd-demo/demo.db", "--at-rest", cwd=tmp_path)
    assert check.returncode == 0, explain(check)


@pytest.mark.parametrize(
    ("flags", "env"), [(["--dev"], {}), ([], {"FXD_HTTP_DEV": "1"})], ids=["flag", "env"]
)
def test_serve_dev_mode_from_the_flag_or_the_environment(
    flags: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    """``FXD_HTTP_DEV=1 fxdurable serve`` is ``fxdurable serve --dev`` (the docs' table):
    no tokens needed, and every caller is the principal ``dev``, who owns what it creates."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fxdurable", "serve", "--port", str(port), *flags],
        cwd=tmp_path,
        env=base | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(f"{url}/healthz", proc, timeout_s=30, output=lambda: _drain(proc))
        answer = httpx.post(
            f"{url}/chat",
            json={"sessionId": "ops-1", "prompt": "status?", "whenBusy": "reject"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        state = httpx.get(f"{url}/sessions/ops-1", timeout=10)
        assert state.status_code == 200, state.text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    store = open_store(f"sqlite:///{tmp_path / '.fxd' / 'fxd.db'}", create=False)
    try:
        # Over HTTP a session is stored under its principal's key (fxdurable.http.scoping).
        session = store.read(lambda view: view.get_session(session_key("dev", "ops-1")))
    finally:
        store.close()
    assert session is not None and session.owner == "dev"


def _drain(proc: subprocess.Popen[bytes]) -> str:
    proc.kill()
    out, _ = proc.communicate(timeout=10)
    return out.decode(errors="replace")
