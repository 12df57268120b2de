"""The README's code example runs as written (a newcomer copies it first)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README lost its Python example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Charged." in result.stdout
    assert "submission.completed" in result.stdout


def test_readme_names_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text


def _readme_commands() -> list[tuple[str, set[str]]]:
    """``(subcommand, its --flags)`` of every ``fxdurable <subcommand> ...`` the README shows,
    in code blocks and in prose (line breaks inside a command are joined)."""
    text = " ".join(README.read_text().split())
    found = re.findall(r"fxdurable (demo|serve|worker|scan|trace|check)((?: +[^\s`#|]+)*)", text)
    return [(command, set(re.findall(r"--[\w-]+", rest))) for command, rest in found]


def test_every_flag_the_readme_gives_a_command_is_accepted_by_it() -> None:
    commands = _readme_commands()
    assert ("demo", {"--provider"}) in commands
    assert ("scan", {"--every"}) in commands
    helps: dict[str, str] = {}
    for command, flags in commands:
        if command not in helps:
            helps[command] = subprocess.run(
                [sys.executable, "-m", "fxdurable", command, "--help"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        for flag in flags:
            assert re.search(rf"(^|[\s,\[]){flag}\b", helps[command]), (
                f"the README gives `fxdurable {command}` {flag}, which it does not accept"
            )


def test_readme_redis_runs_with_an_append_only_file() -> None:
    """The Redis store refuses a Redis that would lose committed steps on restart."""
    (line,) = [ln for ln in README.read_text().splitlines() if ln.startswith("redis-server ")]
    assert "--appendonly yes" in line


def _scan_every(server: Any, every: str, **env: str) -> subprocess.Popen[str]:
    """``fxdurable scan --every`` against ``server`` (a Redis of ``redis_factory``)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    return subprocess.Popen(
        [sys.executable, "-m", "fxdurable", "scan", "--every", every],
        env=base
        | {
            "FXD_STORE": f"{server.url}/0",
            "FXD_QUEUE": f"rq://127.0.0.1:{server.port}/0",
            "FXD_AGENTS": "fxdurable.cli.demo_agent:agents",
        }
        | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_readme_scan_every_runs_until_stopped(redis_factory: Callable[..., Any]) -> None:
    """``fxdurable scan --every 5`` as the Redis section runs it beside the workers: it scans,
    keeps scanning, and Ctrl-C stops it cleanly (exit 0, no traceback)."""
    server = redis_factory(fsync="always")  # as the README starts it: AOF, fsync always
    proc = _scan_every(server, "5")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert first == "woke 0 session(s)\n", first + out + err
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


def test_scan_every_rides_out_a_redis_outage(redis_factory: Callable[..., Any]) -> None:
    """Repeated scans run beside the workers and, like them, outlive a Redis that goes away:
    each failed scan is one line on stderr, and scanning resumes when Redis is back."""
    server = redis_factory()
    proc = _scan_every(server, "0.2", FXD_SCAN_QUIET_S="0")  # wake an unheld session at once
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == "woke 0 session(s)\n"
        server.stop(signal.SIGKILL)
        failed = proc.stderr.readline()
        assert failed.startswith("scan failed (") and "retrying in 0.2s" in failed, failed
        assert proc.poll() is None, "scan --every exited in the outage"
        server.start()
        # Work admitted after the outage: only a scan that resumed can wake it.
        store = open_store(f"{server.url}/0")
        try:
            Journal(store, SystemClock(), RandomIds()).admit("s1", agent="demo", prompt="hi")
        finally:
            store.close()
        deadline = time.monotonic() + 30
        while proc.stdout.readline() != "woke 1 session(s)\n":
            assert time.monotonic() < deadline, "scanning did not resume"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


def _sh_block_after(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert match, f"no sh block under {heading!r}"
    return match.group(1)


def test_readme_sqs_and_dynamodb_walkthrough_runs(tmp_path: Path) -> None:
    """The local SQS + DynamoDB section as a newcomer pastes it (moto on a free port instead
    of 5000, which may be taken): a worker on the SQS queue runs the demo's turn to completion
    on the DynamoDB store."""
    from fxdurable.testing.net import free_port

    block = _sh_block_after("## Workers on SQS and DynamoDB, locally")
    assert block.count("5000") >= 4, "the section's port moved: update this test"
    script = block.replace("5000", str(free_port()))
    (tmp_path / ".venv").symlink_to(sys.prefix)  # the venv these tests run in
    env = {
        **os.environ,
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    for name in ("FXD_STORE", "FXD_QUEUE", "FXD_AGENTS", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    done = subprocess.run(
        ["bash", "-c", "set -e\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n" + script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    logs = "".join(
        f"\n--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted(tmp_path.glob("*.log"))
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    assert "Outcome: completed" in done.stdout, done.stdout[-3000:] + logs


def run_section_example(heading: str, tmp_path: Path) -> list[str]:
    """Run the first Python block under ``heading`` as written, in ``tmp_path``; its stdout
    lines."""
    section = README.read_text().split(heading, 1)[1]
    block = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    script = tmp_path / "example.py"
    script.write_text(block)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_readme_subagents_example_runs(tmp_path: Path) -> None:
    """The "Subagents" section's example runs as written: the parent's answer, the call's
    result and child session, the child's conversation."""
    answer, call, history = run_section_example("### Subagents", tmp_path)
    assert answer == "Research says: China."
    assert re.fullmatch(
        r"Tea was first drunk in China, about 2700 BC\. from sub-x[0-9a-f]{31}", call
    )
    assert (
        history == "['Where was tea first drunk?', 'Tea was first drunk in China, about 2700 BC.']"
    )


def test_readme_workspace_tools_example_runs(tmp_path: Path) -> None:
    """The "Workspace tools" example: the turn's answer, each call's last line (a read, the
    edit, the shell's output, the refused wander outside), the session's fixed copy."""
    lines = run_section_example("### Workspace tools", tmp_path)
    assert lines[:4] == [
        "Fixed: add(2, 3) is 5.",
        "read_file ->      2\t    return a - b",
        "edit_file -> edited calc.py: replaced 1 occurrence",
        "shell -> 5",
    ]
    assert lines[4].startswith("read_file -> PathRefusedError: path refused: '../../etc/passwd'")
    assert lines[5:] == ["def add(a, b):", "    return a + b", ""]
    assert (tmp_path / "project" / "calc.py").read_text().endswith("a - b\n")  # the template
