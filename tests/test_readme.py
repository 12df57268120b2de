"""README.md and the docs pages as a newcomer reads them: every shell and Python block runs
verbatim here or names the test that runs it (or why it cannot run), and what the pages say
about commands, flags and outputs is what the code does (tests/docs_blocks.py has the rules).

A block run verbatim runs in a temporary directory (one per page, the page's blocks in order,
so a walkthrough's later steps see its earlier ones) with the test venv's ``fxdurable`` and
``python`` on PATH and ``.venv`` linking to that venv. A shell block passes when it exits 0 and
every line of it that starts with ``#`` (the output it shows) appears in what it printed:
each piece between ``...``/``…`` in order. A Python block whose first line is ``# name.py``
is saved under that name, for the shell blocks after it to run."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from docs_blocks import PYTHON, README, ROOT, SHELL, Block, blocks, pages, section_blocks

from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal

DEPLOYMENT = ROOT / "docs" / "deployment" / "index.md"
AGENTS = ROOT / "docs" / "agents.md"
WORKSPACE = ROOT / "docs" / "workspace.md"
VENV_BIN = Path(sys.executable).parent


def _all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def _block_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "AWS_", "OPENAI_"))}
    env.pop("ANTHROPIC_API_KEY", None)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")
    return env


def _shown_output(body: str) -> list[list[str]]:
    """The output a shell block shows: its lines that start with ``#``, each as the pieces
    between ``...`` (or ``…``) that the output must contain in order."""
    shown = []
    for line in body.splitlines():
        if line.startswith("#"):
            pieces = [p.strip() for p in re.split(r"\.\.\.|…", line[1:]) if p.strip()]
            if pieces:
                shown.append(pieces)
    return shown


def _run_verbatim(block: Block, cwd: Path) -> None:
    env = _block_env(cwd)
    if block.lang in SHELL:
        command = ["bash", "-c", block.body]
    else:
        named = re.fullmatch(r"# ([\w-]+\.py)", block.body.partition("\n")[0])
        script = cwd / (named[1] if named else f"block_{block.line}.py")
        script.write_text(block.body)
        command = [sys.executable, str(script)]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, f"{block.where} exited {done.returncode}:\n{printed[-3000:]}"
    if block.lang not in SHELL:
        return
    for pieces in _shown_output(block.body):
        at = 0
        for piece in pieces:
            found = printed.find(piece, at)
            assert found != -1, f"{block.where} shows {piece!r}, not in its output:\n{printed}"
            at = found + len(piece)


def _verbatim_pages() -> list[Path]:
    return [page for page in pages() if any(b.mark is None for b in blocks(page))]


@pytest.mark.slow
@pytest.mark.parametrize("page", _verbatim_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_unmarked_block_of_the_page_runs_verbatim(page: Path, tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(sys.prefix)  # .venv/bin/fxdurable, as in a clone
    for block in blocks(page):
        if block.mark is None:
            _run_verbatim(block, tmp_path)


def test_every_block_that_does_not_run_here_names_its_test_or_its_reason() -> None:
    all_blocks = _all_blocks()
    assert len(all_blocks) > 30, "the pages lost their code blocks"
    for block in all_blocks:
        if block.mark == "not-runnable":
            assert len(block.what) >= 10, f"{block.where}: say why it cannot run here"
        elif block.mark == "tested":
            path, _, name = block.what.partition("::")
            test_file = ROOT / path
            assert test_file.is_file(), f"{block.where} names {path}, which does not exist"
            defined = {
                node.name
                for node in ast.walk(ast.parse(test_file.read_text()))
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            assert name in defined, f"{block.where} names {block.what}: no such test"


def test_every_page_is_in_the_site() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in pages()[1:]:
        assert str(page.relative_to(ROOT / "docs")) in nav, f"{page} is in no nav entry"


def test_readme_fits_on_a_screen() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"


def test_readme_names_the_two_commands_and_the_python_to_use() -> None:
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    assert "PYTHON=python3.12 make demo" in text


def _quickstart() -> str:
    (block,) = section_blocks(README, "## Quickstart: your agent, a real model", PYTHON)
    assert len(block.splitlines()) <= 30, "the quickstart is a screen, not a program"
    return block


def _quickstart_shell() -> list[list[str]]:
    """The quickstart's shell blocks, each as its command lines (comments dropped)."""
    return [
        [line.split("  #", 1)[0].strip() for line in block.splitlines()]
        for block in section_blocks(README, "## Quickstart: your agent, a real model", SHELL)
    ]


def test_quickstart_runs_on_a_provider_and_offline(tmp_path: Path) -> None:
    """The quickstart as written, each command of its shell blocks run in one directory:
    ``python agent.py`` with the base URL and key exported (a scripted model served in
    OpenAI's wire format stands in for the provider), ``python agent.py --offline`` with no
    model server at all; then killed mid-deploy and run again: the deploy ran once and is
    recorded outcome_unknown."""
    from fxdurable import call, reply
    from fxdurable.testing import ScriptedModelServer

    (tmp_path / "agent.py").write_text(_quickstart())
    provider, crash = _quickstart_shell()
    exports = [line for line in provider if line.startswith("export ")]
    assert [e.split("=", 1)[0] for e in exports] == [
        "export OPENAI_BASE_URL",
        "export OPENAI_API_KEY",
    ]
    assert [line for line in provider if line not in exports] == [
        "python agent.py",
        "python agent.py --offline",
    ]

    def sh(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    policy = [reply("", call("deploy", version="1.4")), reply("Release 1.4 is deployed.")]
    with ScriptedModelServer(policy) as server:
        env = _block_env(tmp_path) | {
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "sk-test-quickstart-0123456789",
        }
        online = sh("python agent.py", env)
        assert (online.returncode, online.stdout) == (0, "Release 1.4 is deployed.\n"), online
        assert [r.body["model"] for r in server.requests] == ["gpt-4o-mini"] * 2
        assert all(r.headers["authorization"] == "[REDACTED]" for r in server.requests)
        again = sh("python agent.py", env)  # the same request id: answered from the record
        assert (again.returncode, again.stdout) == (0, online.stdout), again
        assert len(server.requests) == 2

    env = _block_env(tmp_path)  # no base URL, no key: nothing to reach
    offline = sh("python agent.py --offline", env)
    assert (offline.returncode, offline.stdout) == (0, "Done.\n"), offline
    assert len((tmp_path / "deployments.log").read_text().splitlines()) == 2  # one each

    assert crash[0] == "rm -rf .fxd deployments.log"
    done = [sh(line, env) for line in crash]
    assert done[1].returncode == -signal.SIGKILL or done[1].returncode == 137, done[1]
    assert "crash injected at tool.after-execute:deploy" in done[1].stderr
    assert (done[2].returncode, done[2].stdout) == (0, "Done.\n"), done[2]
    assert done[3].stdout.split() == ["1", "deployments.log"]
    trace = sh("fxdurable trace offline --db .fxd/ops.db", env).stdout
    assert "tool deploy r0.t0 outcome_unknown" in trace, trace


def _documented_commands() -> list[tuple[str, set[str]]]:
    """``(subcommand, its --flags)`` of every ``fxdurable <subcommand> ...`` the README and the
    docs show, in code blocks and in prose (line breaks inside a command are joined)."""
    found = []
    for page in pages():
        if page.name == "benchmarks.md":  # bench's figures, written by make bench: no commands
            continue
        text = " ".join(page.read_text().split())
        for command, rest in re.findall(
            r"fxdurable (demo|serve|worker|scan|trace|check)((?: +(?!fxdurable\b)[^\s`#|<>&;]+)*)",
            text,
        ):
            found.append((command, set(re.findall(r"--[\w-]+", rest))))
    return found


def test_every_flag_the_docs_give_a_command_is_accepted_by_it() -> None:
    commands = _documented_commands()
    assert ("demo", {"--provider", "--dir"}) in commands
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
                f"the docs give `fxdurable {command}` {flag}, which it does not accept"
            )


def test_docs_redis_runs_with_an_append_only_file() -> None:
    """The Redis store refuses a Redis that would lose committed steps on restart."""
    lines = [
        line.strip()
        for page in pages()
        for line in page.read_text().splitlines()
        if line.strip().startswith("redis-server ")
    ]
    assert lines, "the docs lost their redis-server line"
    for line in lines:
        assert "--appendonly yes" in line, line


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


def test_scan_every_runs_until_stopped(redis_factory: Callable[..., Any]) -> None:
    """``fxdurable scan --every 5`` as the Redis section runs it beside the workers: it scans,
    keeps scanning, and Ctrl-C stops it cleanly (exit 0, no traceback)."""
    assert "fxdurable scan --every 5" in " ".join(DEPLOYMENT.read_text().split())
    server = redis_factory(fsync="always")  # as the docs start it: AOF, fsync always
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


@pytest.mark.slow
def test_sqs_and_dynamodb_walkthrough_runs(tmp_path: Path) -> None:
    """The local SQS + DynamoDB section as a newcomer pastes it (moto on a free port instead
    of 5000, which may be taken): a worker on the SQS queue runs the demo's turn to completion
    on the DynamoDB store."""
    from fxdurable.testing.net import free_port

    block = section_blocks(DEPLOYMENT, "## Workers on SQS and DynamoDB, locally", SHELL)[0]
    assert block.count("5000") >= 4, "the section's port moved: update this test"
    script = block.replace("5000", str(free_port()))
    (tmp_path / ".venv").symlink_to(sys.prefix)  # the venv these tests run in
    env = _block_env(tmp_path)
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


def run_section_example(page: Path, heading: str, tmp_path: Path, index: int = 0) -> list[str]:
    """Run the ``index``-th Python block under ``heading`` of ``page`` as written, in
    ``tmp_path``; its stdout lines."""
    block = section_blocks(page, heading, PYTHON)[index]
    script = tmp_path / "example.py"
    script.write_text(block)
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_agents_first_example_runs(tmp_path: Path) -> None:
    """The agents page's first example: an idempotent charge, its answer, the events."""
    lines = run_section_example(AGENTS, "## A first agent", tmp_path)
    assert lines[0] == "Charged."
    assert any(line.endswith(" submission.completed") for line in lines[1:])


def test_subagents_example_runs(tmp_path: Path) -> None:
    """The "Subagents" section's example runs as written: the parent's answer, the call's
    result and child session, the child's conversation."""
    answer, call, history = run_section_example(AGENTS, "## Subagents", tmp_path)
    assert answer == "Research says: China."
    assert re.fullmatch(
        r"Tea was first drunk in China, about 2700 BC\. from sub-x[0-9a-f]{31}", call
    )
    assert (
        history == "['Where was tea first drunk?', 'Tea was first drunk in China, about 2700 BC.']"
    )


def test_workspace_tools_example_runs(tmp_path: Path) -> None:
    """The "Workspace tools" example: the turn's answer, each call's last line (a read, the
    edit, the shell's output, the refused wander outside), the session's fixed copy."""
    lines = run_section_example(WORKSPACE, "## An agent that fixes a file", tmp_path)
    assert lines[:4] == [
        "Fixed: add(2, 3) is 5.",
        "read_file ->      2\t    return a - b",
        "edit_file -> edited calc.py: replaced 1 occurrence",
        "shell -> 5",
    ]
    assert lines[4].startswith("read_file -> PathRefusedError: path refused: '../../etc/passwd'")
    assert lines[5:] == ["def add(a, b):", "    return a + b", ""]
    assert (tmp_path / "project" / "calc.py").read_text().endswith("a - b\n")  # the template


@pytest.mark.parametrize("module", ["fxdurable", "fxdurable.tools", "fxdurable.http"])
def test_the_api_reference_shows_every_public_name(module: str) -> None:
    """docs/reference.md renders each name of the module's ``__all__`` (the errors
    ``fxdurable.tools`` re-exports are shown once, under ``fxdurable``)."""
    import importlib

    text = (ROOT / "docs" / "reference.md").read_text()
    shown = set(re.findall(rf"^::: {re.escape(module)}\.(\w+)$", text, flags=re.M))
    shown -= {"backends", "tools", "http", "testing"}  # modules rendered whole
    public = set(importlib.import_module(module).__all__) - {"__version__"}
    if module == "fxdurable.tools":
        public -= {"EditError", "PathRefusedError", "WorkspaceError"}
    assert shown == public, f"add to docs/reference.md: {public - shown}; gone: {shown - public}"
