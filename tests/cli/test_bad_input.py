"""Bad input gets one line that says what to do, no traceback, and loses nothing: an
unreachable RQ queue after admission, a crash point that does not exist (checked at process
start by every entry point), an ambiguous ``sqlite:`` URL, a crash point naming no tool of the
agent. Real ``fxdurable`` subprocesses in scratch directories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fxdurable.backends import open_store
from fxdurable.core.crash import CRASH_POINTS
from fxdurable.errors import ConfigurationError
from fxdurable.testing.net import free_port


def fxd(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    return subprocess.run(
        [sys.executable, "-m", "fxdurable", *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("fxdurable: "), line
    return line


def test_an_unreachable_rq_queue_says_the_prompt_was_admitted(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    proc = fxd("demo", "--queue", f"rq://127.0.0.1:{port}/0", cwd=tmp_path)
    line = _one_line_error(proc)
    assert "the prompt was admitted (submission sub-" in line, line
    assert f"127.0.0.1:{port}" in line and "`fxdurable scan` will run it" in line, line
    # Nothing is lost: the submission is in the store, waiting for a worker or a scan.
    store = open_store(f"sqlite:///{tmp_path / '.fxd-demo' / 'demo.db'}", create=False)
    try:
        (sub,) = store.read(lambda view: list(view.submissions("engineer")))
    finally:
        store.close()
    assert sub.id in line and sub.status == "queued", sub


@pytest.mark.parametrize(
    "command",
    [
        ["demo"],
        ["worker", "--queue", "rq://127.0.0.1:1/0", "--store", "sqlite:///w.db", "--agents", "x:y"],
        ["scan", "--queue", "rq://127.0.0.1:1/0", "--store", "sqlite:///w.db", "--agents", "x:y"],
        ["serve", "--dev", "--db", "s.db", "--port", "1"],
    ],
    ids=["demo", "worker", "scan", "serve"],
)
def test_a_bogus_crash_point_is_refused_at_start_listing_the_valid_ones(
    command: list[str], tmp_path: Path
) -> None:
    line = _one_line_error(fxd(*command, cwd=tmp_path, FXD_CRASH_AT="bogus.point"))
    assert "FXD_CRASH_AT names no crash point 'bogus.point'; valid points: " in line, line
    assert all(point in line for point in CRASH_POINTS), line
    assert list(tmp_path.iterdir()) == [], "refused before anything was created or admitted"


def test_the_lambda_functions_refuse_a_bogus_crash_point_at_cold_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fxdurable.aws_lambda.http import HttpFunction
    from fxdurable.aws_lambda.scan import ScanFunction
    from fxdurable.aws_lambda.wake import WakeFunction

    monkeypatch.setenv("FXD_CRASH_AT", "tool.after-exectue")
    for function in (WakeFunction, HttpFunction, ScanFunction):
        with pytest.raises(ConfigurationError, match=r"names no crash point 'tool\.after-exectue'"):
            function.from_env()


def test_a_crash_point_naming_no_tool_of_the_agent_lists_its_tools(tmp_path: Path) -> None:
    line = _one_line_error(fxd("demo", "--crash-at", "tool.after-execute:deply", cwd=tmp_path))
    assert "no tool of the agent is called 'deply'" in line, line
    assert "its tools: check_deployment, deploy, run_tests" in line, line
    assert list(tmp_path.iterdir()) == [], "nothing admitted"
    same = _one_line_error(fxd("demo", cwd=tmp_path, FXD_CRASH_AT="tool.after-intent:deply"))
    assert "FXD_CRASH_AT 'tool.after-intent:deply': no tool of the agent" in same, same


@pytest.mark.parametrize("url", ["sqlite:/x.db", "sqlite:x.db"])
def test_a_sqlite_url_without_three_slashes_is_refused_with_both_spellings(
    url: str, tmp_path: Path
) -> None:
    line = _one_line_error(fxd("demo", "--store", url, cwd=tmp_path))
    assert "write sqlite:///x.db for the relative path x.db or sqlite:////x.db for /x.db" in line
    assert not (tmp_path / "x.db").exists() and not Path("/x.db").exists()


def test_sqlite_urls_follow_rfc_3986_three_slashes_relative_four_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel/here.db")
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db")  # sqlite:////tmp/... : absolute
    try:
        assert (tmp_path / "rel" / "here.db").is_file()
        assert (tmp_path / "abs.db").is_file()
    finally:
        relative.close()
        absolute.close()


@pytest.mark.parametrize("every", ["0", "-5", "nan", "soon"])
def test_scan_every_needs_a_positive_pause(every: str, tmp_path: Path) -> None:
    """``--every 0`` would scan in a loop without a pause: refused before anything runs."""
    done = fxd(
        "scan",
        "--queue",
        "rq://127.0.0.1:1/0",
        "--store",
        "sqlite:///w.db",
        "--every",
        every,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done
    assert "--every" in done.stderr and (
        "without a pause" in done.stderr or "not a number" in done.stderr
    )
    assert list(tmp_path.iterdir()) == [], "refused before the store was opened"
