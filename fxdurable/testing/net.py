"""Local servers for tests and benchmarks: a free port, and waiting for a server to answer."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

import httpx

__all__ = ["free_port", "wait_healthy"]


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
