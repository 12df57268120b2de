"""``python -m fxdurable.testing.model_server`` with a policy of its own (``--policy
module:attr``) and a log of the requests it received (``--request-log``): a process, as a
person runs it beside ``make coding-ui`` (docs/coding-agent.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from model_server_support import openai_body, post

from fxdurable.errors import ConfigurationError
from fxdurable.testing.model_server import PolicyImportError, load_policy

REPO = Path(__file__).resolve().parents[2]
CODING_POLICY = "examples.coding_agent.policy:coding_policy"
SECRET = "sk-not-for-the-log-0123456789"
BAD = "examples.coding_agent.policy:MAX_PLANS"  # an int


@contextmanager
def model_server(*args: str) -> Iterator[str]:
    """The server as its own process, from the repository's root; yields its OpenAI base."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fxdurable.testing.model_server", "--port", "0", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # "OpenAI:    http://.../v1/chat/completions"
        assert first.startswith("OpenAI:"), first + process.stderr.read() if process.stderr else ""
        yield first.split()[-1].removesuffix("/chat/completions")
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: it stops cleanly, exit status 0
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
            raise AssertionError(f"the server ignored SIGINT for 30 s: {err}") from None
    assert process.returncode == 0, err


def test_it_serves_the_policy_named_and_logs_each_request_without_its_headers(tmp_path):
    log = tmp_path / "requests.jsonl"
    with model_server("--policy", CODING_POLICY, "--request-log", str(log)) as base:
        # No edit_file offered: the coding policy answers as its explore subagent does.
        messages = [{"role": "user", "content": "Look around the project."}]
        answer = post(
            f"{base}/chat/completions",
            openai_body(messages, model="scripted-coder"),
            headers={"Authorization": f"Bearer {SECRET}"},
        )
        assert answer.status == 200
        calls = [
            c["function"].get("name")
            for e in answer.events
            if e.data != "[DONE]"
            for c in e.json["choices"][0]["delta"].get("tool_calls") or []
        ]
        assert "glob_files" in calls, answer.raw
        assert post(f"{base}/v1/nowhere", {"model": "x"}).status == 404
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["path"], e["model"], e["messages"]) for e in entries] == [
        ("/v1/chat/completions", "scripted-coder", 1),
        ("/v1/v1/nowhere", "x", None),
    ]
    assert SECRET not in log.read_text() and "raw" not in entries[0]


def test_python_m_runs_a_standalone_echo_server_by_default():
    with model_server() as base:
        answer = post(f"{base}/chat/completions", openai_body([{"role": "user", "content": "hi"}]))
    text = "".join(
        e.json["choices"][0]["delta"].get("content") or ""
        for e in answer.events
        if e.data != "[DONE]"
    )
    assert text == "echo: hi"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("examples.coding_agent.policy", "must look like 'package.module:attribute'"),
        ("no_such_module_here:policy", "no module named 'no_such_module_here'"),
        ("examples.coding_agent.policy:no_such_policy", "has no attribute 'no_such_policy'"),
        (BAD, "is not callable (its type is int)"),
    ],
)
def test_a_policy_that_does_not_import_or_cannot_be_called_is_refused(spec, says):
    with pytest.raises(PolicyImportError) as caught:
        load_policy(spec)
    assert says in str(caught.value)
    assert isinstance(caught.value, ConfigurationError)


def test_the_command_line_refuses_a_bad_policy_with_its_reason_and_no_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "fxdurable.testing.model_server", "--policy", BAD],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "is not callable (its type is int)" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_coding_policy_loads_by_name():
    from examples.coding_agent.policy import coding_policy

    assert load_policy(CODING_POLICY) is coding_policy
