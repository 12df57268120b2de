"""A real ``fxdurable serve`` in a subprocess, for the HTTP tests.

``ServedApp.start()`` launches ``python -m fxdurable.cli.main serve`` on a free port with the
crash driver's story agent (``tests.crash.driver:agents``: the ``tests.kit.story`` agent, its
outside world in ``workdir``) and waits for ``GET /healthz``. ``crash_at`` sets
``FXD_CRASH_AT`` so the server SIGKILLs itself at that point; ``kill()`` SIGKILLs it from
outside; ``start()`` again is the restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from redis_support import free_port

from fxdurable.testing.net import wait_healthy
from tests.kit.world import World, read_world

REPO = Path(__file__).resolve().parents[2]
ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-0123456789abcdef"
TOKENS = f"alice={ALICE_TOKEN},bob={BOB_TOKEN}"
WAKE_SECRET = "wake-secret-0123456789abcdef"
ALICE = {"Authorization": f"Bearer {ALICE_TOKEN}"}
BOB = {"Authorization": f"Bearer {BOB_TOKEN}"}
STARTUP_TIMEOUT_S = 20.0


class ServedApp:
    def __init__(
        self,
        tmp_path: Path,
        *,
        store_url: str | None = None,
        scenario: str = "story",
        extra_env: dict[str, str] | None = None,
        args: list[str] | None = None,
        verbose: bool = False,
    ) -> None:
        self.workdir = tmp_path / "world"
        self.workdir.mkdir(exist_ok=True)
        self.store_url = store_url or f"sqlite:///{tmp_path.resolve()}/http.db"
        self.scenario = scenario
        self.extra_env = extra_env or {}
        self.args = args or []
        self.verbose = verbose  # -v: the log has the debug and info lines too
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self, crash_at: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        env["FXD_HTTP_TOKENS"] = TOKENS
        env["FXD_WAKE_SECRET"] = WAKE_SECRET
        env["FXD_CRASH_DIR"] = str(self.workdir)
        env["FXD_CRASH_SCENARIO"] = self.scenario
        # A restarted server takes over its dead self's lease at once (same host, dead pid);
        # a short TTL bounds the wait when the pid check cannot tell.
        env["FXD_LEASE_TTL_S"] = "3"
        env["FXD_HEARTBEAT_S"] = "0.5"
        env["FXD_SCAN_INTERVAL_S"] = "0.5"
        if crash_at:
            env["FXD_CRASH_AT"] = crash_at
        env.update(self.extra_env)
        return env

    def start(self, *, crash_at: str | None = None, wait: bool = True) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        command = [
            sys.executable,
            "-m",
            "fxdurable.cli.main",
            *(["--verbose"] if self.verbose else []),
            "serve",
            "--port",
            str(self.port),
            "--agents",
            "tests.crash.driver:agents",
            "--store",
            self.store_url,
            *self.args,
        ]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO, env=self.env(crash_at), stdout=log, stderr=subprocess.STDOUT
            )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        assert self.proc is not None
        try:
            wait_healthy(
                f"{self.url}/healthz", self.proc, timeout_s=STARTUP_TIMEOUT_S, output=self.output
            )
        except RuntimeError as exc:
            raise AssertionError(str(exc)) from None

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM (a redeploy) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the server ignored SIGTERM:\n{self.output()}") from None

    def world_at_rest(self, timeout: float = 10.0) -> World:
        """The world once the server has let go of every session. A client sees ``turn_end``
        as soon as the turn settles, a moment before its worker releases the lease."""
        deadline = time.monotonic() + timeout
        while True:
            world = read_world(self.store_url, self.workdir)
            held = [
                s
                for s in world.sessions.values()
                if s.lease.owner is not None and s.lease.expires_at > time.time()
            ]
            if not held or time.monotonic() > deadline:
                return world  # a lease still held then fails the invariants, with its record
            time.sleep(0.02)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
