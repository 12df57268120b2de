"""The coding agent's page backend as ``make coding-ui`` serves it, for the tests: a real
``fxdurable serve --dev --demo`` (its worker a process of its own) on a free port, in a
directory of the test's, with a gate that holds an ``edit_file`` open until the test opens it
(``FXD_CODING_GATE``, examples/coding_agent/tools.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from fxdurable.http.lines import line_adapter
from fxdurable.testing.net import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
FXDURABLE = Path(sys.executable).parent / "fxdurable"
SPEC = "examples.coding_agent.web:agents"
TIMEOUT = httpx.Timeout(60.0)
HANG_S = 90.0  # a turn takes a few seconds; past this the test calls it a hang
_MODEL_CHOOSERS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")

Line = dict[str, Any]


class CodingServer:
    """The served page backend; ``stop()`` kills its process group (the worker with it)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.gate = where / "gate"
        self.gate.mkdir(parents=True)
        self.open_gate()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("FXD_") and k not in _MODEL_CHOOSERS
        }
        env |= {"FXD_CODING_DIR": str(where / "coding"), "FXD_CODING_GATE": str(self.gate)}
        self.log = where / "serve.log"
        command = [
            str(FXDURABLE), "serve", "--dev", "--demo", "--port", str(port),
            "--db", str(where / "coding.db"), "--agents", SPEC,
        ]  # fmt: skip
        with self.log.open("ab") as log:
            # From the repository's root, as make coding-ui runs it: examples/ is importable.
            self.proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        wait_healthy(f"{self.url}/healthz", self.proc, timeout_s=30, output=self.log.read_text)
        self.client = httpx.Client(base_url=self.url, timeout=TIMEOUT)

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    # -- the gate ------------------------------------------------------------------------------

    def open_gate(self) -> None:
        (self.gate / "edit_file.open").touch()

    def close_gate(self) -> None:
        (self.gate / "edit_file.open").unlink(missing_ok=True)

    def arrived(self) -> set[str]:
        return {p.name for p in self.gate.glob("edit_file.arrived.*")}

    def wait_for_an_edit(self, before: set[str]) -> str:
        """The first edit that reached the closed gate since ``before`` (polled: it is another
        process's file)."""
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline:
            new = self.arrived() - before
            if new:
                return sorted(new)[0]
            time.sleep(0.02)
        raise AssertionError(f"no edit reached the gate; log:\n{self.log.read_text()[-3000:]}")

    # -- the session's files -------------------------------------------------------------------

    def workspace(self, session: str) -> Path:
        """A session's own copy of the project (its store key: the principal is ``dev``)."""
        from fxdurable.tools.directory_workspace import safe_name

        return self.where / "coding" / "workspace" / safe_name(f"dev/{session}")

    def project_tests(self, session: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "unittest", "-v"],
            cwd=self.workspace(session),
            capture_output=True,
            text=True,
            check=False,
        )

    def calls(self, session: str) -> list[dict[str, Any]]:
        reply = self.client.get(f"/sessions/{session}/calls")
        assert reply.status_code == 200, reply.text
        calls: list[dict[str, Any]] = reply.json()["calls"]
        return calls


def lines(response: httpx.Response) -> Iterator[Line]:
    """A chat stream's lines, each validated against the published vocabulary; ``progress``
    lines dropped (polled state, not events)."""
    for raw in response.iter_lines():
        if not raw:
            continue
        line_adapter().validate_json(raw)
        line: Line = json.loads(raw)
        if line["type"] != "progress":
            yield line


def until(stream: Iterator[Line], seen: list[Line], kind: str, tool: str | None = None) -> Line:
    """Read ``stream`` into ``seen`` up to the first line of ``kind`` (about ``tool``)."""
    for line in stream:
        seen.append(line)
        if line["type"] == kind and (tool is None or line["data"].get("tool") == tool):
            return line
    raise AssertionError(f"the stream ended before a {kind} line: {[s['type'] for s in seen]}")


def edit_results(seen: list[Line]) -> list[str]:
    return [
        s["data"]["result"]
        for s in seen
        if s["type"] == "tool.completed" and s["data"]["tool"] == "edit_file"
    ]
