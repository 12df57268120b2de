"""A moto server (``python -m moto.server``) on a free port of 127.0.0.1, stopped at the end.

The DynamoDB figures (:mod:`bench.dynamodb_steps`) are counted against a server the bench
starts, never against AWS; the tests' ``moto_server`` fixture starts theirs through this too.

moto applies a ``TransactWriteItems`` item by item, without a lock, and rolls a failed one
back by restoring a copy of the whole table: on its (threaded) server, two concurrent
transactions are not isolated, which DynamoDB's are. ``serial=True`` serves one request at a
time, so tests of concurrent writers see DynamoDB's serializable transactions.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fxdurable.testing.net import free_port, stop_process, wait_healthy

__all__ = ["moto_server"]

# The serial server reads one connection at a time, so a client that stops between connect()
# and sending its request (a test SIGSTOPs a worker mid-heartbeat) would stall every other
# client until it resumed: DynamoDB serves each connection on its own. A read that waits past
# STALLED_CLIENT_S drops that connection instead; a live client sends its request at once.
STALLED_CLIENT_S = 2.0

_SERIAL = """
from werkzeug.serving import WSGIRequestHandler, run_simple
from moto.server import DomainDispatcherApplication, create_backend_app

class DropStalledClients(WSGIRequestHandler):
    timeout = {stalled_s}

run_simple(
    "127.0.0.1",
    {port},
    DomainDispatcherApplication(create_backend_app),
    threaded=False,
    request_handler=DropStalledClients,
)
"""


@contextmanager
def moto_server(directory: Path, timeout_s: float = 30.0, *, serial: bool = False) -> Iterator[str]:
    """Yields the endpoint URL; its output goes to ``directory/moto.log``. Raises
    RuntimeError when it does not answer within ``timeout_s``."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = directory / ("moto-serial.log" if serial else "moto.log")
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    if serial:
        command = [sys.executable, "-c", _SERIAL.format(port=port, stalled_s=STALLED_CLIENT_S)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
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
