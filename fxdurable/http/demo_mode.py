"""Demo mode (``fxdurable serve --dev --demo``): turns run in ONE separate worker process, which
``POST /demo/crash`` SIGKILLs (kill -9) and replaces, so the page stays up and shows the
recovery.

The serve process admits, streams and reads, but runs no turn (its runtime has no worker
tasks). The worker is an ordinary runtime on the same store (``fxdurable.cli.demo_worker``)
whose reconciliation scan runs every 0.2 s. That scan is how wakes reach it: the embedded
SQLite store has no queue between processes, and the store is where every wake's work is
recorded anyway (a wake is only a hint, DESIGN §9). A new prompt, steering, an answer or an
abort is found within one scan; a session the killed worker held is found at once, since its
lease names a dead process on this host.

:class:`DemoWorker` keeps one worker alive: a supervising thread starts it, waits for it, and
starts the next when it exits for any reason (the crash button, a ``kill -9`` from a shell, a
crash of its own), until :meth:`DemoWorker.stop`. The thread lives as long as the supervisor,
because Linux ties ``PR_SET_PDEATHSIG`` (which the worker arms, so it never outlives the
server) to the thread that started it.

An agents' module may bring routes of its own for demo mode (the coding agent's page reads
its files panel and settings through them): a ``demo_routes(runtime, principal)`` beside the
agents ``--agents`` names, which ``fxdurable serve --demo`` mounts with the demo's routes.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fxdurable.errors import FxDurableError
from fxdurable.http.schemas import CrashReply, DemoReply

if TYPE_CHECKING:
    from fxdurable.runtime.runtime import Runtime

__all__ = ["AppRoutes", "DemoWorker", "DemoWorkerError", "demo_routes"]

Principal = Callable[[Request], Awaitable[str]]
# An agents' module's own routes for demo mode: given the server's runtime (which reads and
# answers, but runs no turn) and the routes' authentication.
AppRoutes = Callable[["Runtime", Principal], Sequence[Route]]

log = logging.getLogger("fxdurable.http")

_START_TIMEOUT_S = 10.0
_STOP_GRACE_S = 10.0
# A worker that exits sooner than this after its start, unasked, is broken (a bad agent spec,
# a store it cannot open): the next try waits this long, so the log is not flooded.
_RESTART_BACKOFF_S = 1.0


class DemoWorkerError(FxDurableError):
    """The demo's worker process could not be started (or did not come back in time)."""


class DemoWorker:
    """One worker process running ``command``, replaced whenever it exits."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        routes: AppRoutes | None = None,
    ) -> None:
        self._command = list(command)
        self.routes = routes  # the agents' module's own routes, mounted by demo_routes
        self._env = dict(env) if env is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0  # how many workers were started so far
        self._stopping = False
        self._crash_asked = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def pid(self) -> int:
        with self._changed:
            if self._proc is None:
                raise DemoWorkerError("the demo worker is not running")
            return self._proc.pid

    def start(self) -> int:
        """Start the supervising thread and its first worker; the worker's pid."""
        self._thread = threading.Thread(target=self._supervise, name="fxd-demo-worker", daemon=True)
        self._thread.start()
        return self._wait_for(0)

    def crash(self) -> tuple[int, int]:
        """SIGKILL the worker (no chance to clean up: a crash) and wait for its replacement:
        ``(killed pid, new pid)``."""
        with self._changed:
            proc, number = self._proc, self._started
        if proc is None:
            raise DemoWorkerError("the demo worker is not running")
        log.warning("demo: SIGKILL the worker (pid %d)", proc.pid)
        with self._changed:
            self._crash_asked = True
        proc.send_signal(signal.SIGKILL)
        return proc.pid, self._wait_for(number)

    def stop(self) -> None:
        """SIGTERM the worker (its turns stop at a step boundary), SIGKILL it after the grace,
        and start no other."""
        with self._changed:
            self._stopping = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self._thread is not None:
            self._thread.join(_STOP_GRACE_S)

    def _wait_for(self, after: int) -> int:
        """The pid of the worker started after the first ``after`` ones."""
        with self._changed:
            ready = self._changed.wait_for(
                lambda: self._error is not None or self._started > after, _START_TIMEOUT_S
            )
            if self._error is not None:
                raise DemoWorkerError(f"cannot start the demo worker: {self._error}")
            if not ready or self._proc is None:
                raise DemoWorkerError(
                    f"no demo worker came up within {_START_TIMEOUT_S:g} s: {self._command}"
                )
            return self._proc.pid

    def _supervise(self) -> None:
        while True:
            with self._changed:
                if self._stopping:
                    return
                try:
                    # Same process group as the server: a Ctrl-C reaches both, and whoever
                    # kills the server's group takes the worker with it.
                    proc = subprocess.Popen(self._command, env=self._env)
                except OSError as exc:
                    self._error = exc
                    self._changed.notify_all()
                    return
                self._proc = proc
                self._started += 1
                self._changed.notify_all()
            log.info("demo: worker started (pid %d)", proc.pid)
            started = time.monotonic()
            code = proc.wait()
            with self._changed:
                if self._stopping:
                    return
                asked, self._crash_asked = self._crash_asked, False
            log.warning("demo: the worker (pid %d) exited (%s); starting another", proc.pid, code)
            if not asked and time.monotonic() - started < _RESTART_BACKOFF_S:
                time.sleep(_RESTART_BACKOFF_S)


def demo_routes(
    worker: DemoWorker, principal: Principal, runtime: Runtime | None = None
) -> list[Route]:
    """``GET /demo`` (the console shows its crash button when it answers) and ``POST
    /demo/crash``, both authenticated as every other route; and, given the ``runtime``, the
    routes of the agents' module (:data:`AppRoutes`)."""

    async def status(request: Request) -> Response:
        await principal(request)
        return JSONResponse(DemoReply(worker=worker.pid).model_dump(by_alias=True))

    async def crash(request: Request) -> Response:
        await principal(request)
        killed, new = await asyncio.to_thread(worker.crash)
        return JSONResponse(CrashReply(killed=killed, worker=new).model_dump(by_alias=True))

    own = [] if worker.routes is None or runtime is None else worker.routes(runtime, principal)
    return [
        Route("/demo", status, methods=["GET"]),
        Route("/demo/crash", crash, methods=["POST"]),
        *own,
    ]
