"""A ``redis-server`` of the bench's own, on a free port of 127.0.0.1, stopped at the end.

The Redis and RQ figures are measured against a server the bench starts in its temporary
directory (``--save ""``; ``--appendonly no``, or ``yes`` with ``--appendfsync everysec``), never
against whatever Redis the machine already runs. The store refuses a Redis without AOF unless
its URL says ``?durability=none``, which :meth:`RedisServer.store_url` adds to the no-AOF one.
Without ``redis-server`` on PATH (or without the ``redis`` and ``rq`` packages)
:func:`unavailable_reason` says why, and the bench prints the SQLite figures alone.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from fxdurable.testing.net import free_port

__all__ = ["REDIS_SERVER", "RedisServer", "RedisServerError", "terminate", "unavailable_reason"]

REDIS_SERVER = "redis-server"
_START_TIMEOUT_S = 10.0


class RedisServerError(RuntimeError):
    """The bench's redis-server would not start."""


def unavailable_reason() -> str | None:
    """Why the Redis/RQ rows cannot be measured here, or None when they can."""
    if shutil.which(REDIS_SERVER) is None:
        return (
            f"{REDIS_SERVER} is not on PATH (install it, e.g. apt-get install redis-server, "
            "to measure the Redis store and the RQ workers)"
        )
    try:
        import redis  # noqa: F401
        import rq  # noqa: F401
    except ImportError as exc:
        return f"the redis extra is not installed ({exc}): pip install 'fxdurable[redis]'"
    return None


def terminate(proc: subprocess.Popen[bytes], *, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if ``proc`` is still running ``timeout_s`` later."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class RedisServer:
    """``with RedisServer(directory, appendonly=False) as server: server.url(db)``."""

    def __init__(self, directory: Path, *, appendonly: bool) -> None:
        self.directory = directory
        self.appendonly = appendonly
        self.port = 0
        self.version = "?"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def persistence(self) -> str:
        return "AOF everysec" if self.appendonly else "no AOF"

    @property
    def pid(self) -> int:
        """The server's process id (the soak SIGSTOPs it for a pause)."""
        if self._proc is None:
            raise RedisServerError("the server is not running")
        return self._proc.pid

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def store_url(self, db: int, prefix: str) -> str:
        """A Redis store URL on this server. Without AOF it opts out of the store's durability
        check (``durability=none``) on purpose: the bench measures what persistence costs."""
        opt_out = "" if self.appendonly else "&durability=none"
        return f"{self.url(db)}?prefix={prefix}{opt_out}"

    def _ping(self) -> bool:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start(self) -> None:
        binary = shutil.which(REDIS_SERVER)
        if binary is None:
            raise RedisServerError(f"{REDIS_SERVER} is not on PATH")
        self.directory.mkdir(parents=True, exist_ok=True)
        persistence = ["--appendonly", "no"]
        if self.appendonly:
            persistence = ["--appendonly", "yes", "--appendfsync", "everysec"]
        for _ in range(5):  # another process may take a "free" port before redis binds it
            self.port = free_port()
            proc = subprocess.Popen(
                [
                    binary,
                    "--port", str(self.port),
                    "--bind", "127.0.0.1",
                    "--save", "",
                    *persistence,
                    "--dir", str(self.directory),
                    "--logfile", "redis.log",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            deadline = time.monotonic() + _START_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline and not self._ping():
                time.sleep(0.02)
            if proc.poll() is None and self._ping():
                self._proc = proc
                self.version = self._server_version()
                return
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        log = self.directory / "redis.log"
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
        raise RedisServerError(f"{REDIS_SERVER} would not start; its log ends:\n{tail}")

    def _server_version(self) -> str:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            return str(client.info("server").get("redis_version", "?"))
        finally:
            client.close()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, timeout_s=10)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
