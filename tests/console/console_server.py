"""A real ``fxdurable serve`` in a subprocess, for the browser tests.

``ConsoleServer.start()`` runs ``python -m fxdurable.cli.main serve`` on a free port (kept
across restarts) with a SQLite store in its own directory, which is also its working
directory (the demo agent's ledger of that store, ``console.deployments.log``, lands there)
and holds the test agent's gates (``tests/console/console_agents.py``). It runs in a process
group of its own, so ``kill()`` takes a ``--demo`` server's worker process down with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from fxdurable.testing.net import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[2]
TEST_AGENTS = "tests.console.console_agents:agents"
STARTUP_TIMEOUT_S = 20.0


class ConsoleServer:
    def __init__(
        self,
        workdir: Path,
        *,
        dev: bool = True,
        demo: bool = False,
        agents: str | None = TEST_AGENTS,
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.gates = self.workdir / "gates"
        self.gates.mkdir(parents=True, exist_ok=True)
        self.store_url = f"sqlite:///{self.workdir}/console.db"
        self.dev, self.demo, self.agents, self.token = dev, demo, agents, token
        self.extra_env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.console_url = f"{self.url}/console/"
        self.log = self.workdir / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "fxdurable.cli.main", "serve", "--port", str(self.port)]
        command += ["--store", self.store_url]
        if self.agents:
            command += ["--agents", self.agents]
        if self.dev:
            command.append("--dev")
        if self.demo:
            command.append("--demo")
        if self.token:
            tokens = self.workdir / "tokens"
            tokens.write_text(f"tester={self.token}\n")
            command += ["--tokens-file", str(tokens)]
        return command

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        env["FXD_CONSOLE_GATES"] = str(self.gates)
        # A restarted server takes a dead one's turn over at once (same host, dead pid); a
        # short lease bounds the wait when the pid check cannot tell.
        env["FXD_LEASE_TTL_S"] = "3"
        env["FXD_HEARTBEAT_S"] = "0.5"
        env["FXD_SCAN_INTERVAL_S"] = "0.5"
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.workdir,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_healthy(
                f"{self.url}/healthz", self.proc, timeout_s=STARTUP_TIMEOUT_S, output=self.output
            )
        except RuntimeError as exc:
            raise AssertionError(str(exc)) from None

    def kill(self) -> None:
        """SIGKILL the server and every process it started (a demo worker)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def open_gate(self, name: str) -> None:
        (self.gates / name).touch()

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
