"""A moto server (``python -m moto.server``) on a free port of 127.0.0.1, stopped at the end.

The DynamoDB figures (:mod:`bench.dynamodb_steps`) are counted against a server the bench
starts, never against AWS; the tests' ``moto_server`` fixture starts theirs through this too.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fxdurable.testing.net import free_port, stop_process, wait_healthy

__all__ = ["moto_server"]


@contextmanager
def moto_server(directory: Path, timeout_s: float = 30.0) -> Iterator[str]:
    """Yields the endpoint URL; its output goes to ``directory/moto.log``. Raises
    RuntimeError when it does not answer within ``timeout_s``."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = directory / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(
            f"{endpoint}/moto-api/data.json",
            proc,
            timeout_s=timeout_s,
            output=lambda: log.read_text()[-2000:],
        )
        yield endpoint
    finally:
        if proc.poll() is None:
            stop_process(proc)
