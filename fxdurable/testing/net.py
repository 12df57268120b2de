"""Local servers for tests and benchmarks: a free port, waiting for a server to answer, and
stopping it."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable

import httpx

__all__ = ["free_port", "stop_process", "wait_healthy"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_healthy(
    url: str,
    process: subprocess.Popen[bytes],
    *,
    timeout_s: float,
    output: Callable[[], str],
) -> None:
    """Wait until ``GET url`` answers 200. Raises ``RuntimeError`` with the process's
    ``output()`` if it exits first or does not answer within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}):\n{output()}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the server did not answer {url} in {timeout_s:g}s:\n{output()}")


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` and reap the process; SIGKILL it if it has not exited in 10 s."""
    process.send_signal(sig)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
