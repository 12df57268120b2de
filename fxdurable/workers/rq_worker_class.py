"""The RQ worker class behind ``fxdurable worker``: stock RQ with a few hooks changed.

- A warm shutdown (the first SIGTERM or SIGINT) is forwarded to the running job as SIGUSR1,
  so the turn stops at its next step boundary instead of RQ waiting for the whole job.
- A Redis outage is ridden out. Stock RQ (3.0; rq/rq#1119) retries a lost Redis only in its
  blocking dequeue; anywhere else (the heartbeats it sends every ``job_monitoring_interval``
  while a job runs, the suspension check, registry maintenance, recording the worker's
  state, a finished job's bookkeeping) a connection error escapes its work loop and the
  worker quits, leaving a running work horse without a parent. Here each of those calls logs
  the failure and is tried again at its next turn, so busy and idle workers alike stay up.
  The horse meanwhile goes on while its store answers: the store is the truth, and a job
  whose RQ bookkeeping was lost is found again by the reconciliation scan. A *store* outage
  longer than the session lease stops the horse's run before the lease expires, and a horse
  still inside a tool's code at its stop deadline exits (status 75; docs/leases.md), so no
  effect of it lands once another worker can take the session over.
- The horse never outlives the worker: if anything else ends the worker's watch over a
  running horse, the horse is asked to stop at its next step boundary and, failing that
  within :data:`HORSE_STOP_GRACE_S`, killed (a crash the journal recovers from). A worker
  killed outright (SIGKILL, out of memory) takes its horse with it: on Linux the horse asks
  the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``).

Imported only by :func:`fxdurable.workers.rq_worker.run_worker` (it needs the redis extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import redis
import rq
import rq.exceptions

__all__ = ["HORSE_STOP_GRACE_S", "REDIS_DOWN", "FxdSimpleWorker", "FxdWorker", "FxdWorkerMixin"]

log = logging.getLogger("fxdurable.worker")

#: What redis-py raises when Redis cannot be reached or does not answer.
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

#: How long a horse the worker must let go of gets to reach a step boundary before SIGKILL.
HORSE_STOP_GRACE_S = 30.0

_HORSE_STOP_SIGNALS = {signal.SIGUSR1, signal.SIGTERM}


if TYPE_CHECKING:  # the concrete classes below put an RQ worker class after the mixin
    from rq.worker import BaseWorker as _RqWorker
else:
    _RqWorker = object


class FxdWorkerMixin(_RqWorker):
    """What both of our worker classes change in an RQ worker: a Redis outage is ridden out,
    a warm stop ends an idle worker at its next beat, and a running horse (if any) is told of
    the stop."""

    # An idle worker retries a lost Redis at most every 5 s (RQ's default backs off to 60 s,
    # which would leave the queue unserved for a minute after a short outage).
    max_connection_wait_time = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outage_since: float | None = None

    # -- Redis outages ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _riding_out(self, what: str) -> Iterator[None]:
        """Log a lost Redis during ``what`` instead of letting it end the worker."""
        try:
            yield
        except REDIS_DOWN as exc:
            now = time.monotonic()
            if self._outage_since is None:
                self._outage_since = now
            busy = f" (work horse {self.horse_pid} keeps running)" if self.horse_pid else ""
            log.warning(
                "Redis unreachable for %.0fs: %s failed (%s: %s); the worker stays up and "
                "retries%s",
                now - self._outage_since,
                what,
                type(exc).__name__,
                exc,
                busy,
            )
        else:
            if self._outage_since is not None:
                log.warning(
                    "Redis answers again after %.1fs", time.monotonic() - self._outage_since
                )
                self._outage_since = None

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        if pipeline is None and self._stop_requested and self.get_state() == "idle":
            # A stop whose StopRequested was swallowed (the signal landed inside a logging
            # call) would never end an idle worker: RQ's dequeue loop retries each dequeue
            # timeout without looking at the flag, but beats here before every dequeue.
            # Idle only: a busy worker's warm shutdown waits for its horse.
            raise rq.exceptions.StopRequested()
        if pipeline is not None:  # only queues commands: whoever executes the pipeline copes
            super().heartbeat(timeout, pipeline)
            return
        with self._riding_out("the worker heartbeat"):
            super().heartbeat(timeout)

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if pipeline is not None:
            super().set_state(state, pipeline)
            return
        with self._riding_out(f"recording the worker state {getattr(state, 'value', state)!r}"):
            super().set_state(state)

    def maintain_heartbeats(self, job: Any, execution: Any) -> None:
        # Called by RQ's monitor every job_monitoring_interval while the horse runs: a failure
        # here used to end the monitor and, with it, the worker.
        with self._riding_out(f"the heartbeat of job {job.id}"):
            super().maintain_heartbeats(job, execution)

    def check_for_suspension(self, burst: bool) -> None:
        with self._riding_out("the suspension check"):
            super().check_for_suspension(burst)

    def run_maintenance_tasks(self) -> None:
        with self._riding_out("registry maintenance"):
            super().run_maintenance_tasks()  # type: ignore[no-untyped-call]

    def execute_job(self, job: Any, queue: Any) -> None:
        # Before the job (preparing the execution) or after it (reading and recording the
        # job's status): RQ's record of this job is lost, the store's is not, and the
        # reconciliation scan wakes the session again if it still has work.
        with self._riding_out(f"the bookkeeping of job {job.id}"):
            super().execute_job(job, queue)

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        # RQ stops an idle worker by raising StopRequested from this signal handler; if the
        # signal lands inside a logging call, logging swallows it and RQ would block in its
        # next dequeue. The flag ends an idle worker at the beat before its next dequeue
        # (see heartbeat).
        self._stop_requested = True
        pid = self.horse_pid
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)
        # A busy worker records the request in Redis, which may be down.
        with self._riding_out("recording the shutdown request"):
            super().request_stop(signum, frame)  # type: ignore[no-untyped-call]


class FxdWorker(FxdWorkerMixin, rq.Worker):
    """RQ's forking worker that forwards a warm shutdown, rides out Redis outages, and forks a
    work horse only while ``no_fork`` is free (see ``run_worker``: the scan thread holds it
    while it is inside the store)."""

    def __init__(
        self,
        *args: Any,
        no_fork: threading.Lock | None = None,
        before_first_fork: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._no_fork = no_fork or threading.Lock()
        self._watcher_pid = os.getpid()
        # What every horse shares (fxdurable.workers.warm.prepare_horses): made at the first
        # job, not at start, so the worker registers with Redis as soon as it can.
        self._before_first_fork = before_first_fork

    def execute_job(self, job: Any, queue: Any) -> None:
        try:
            super().execute_job(job, queue)
        finally:
            self._let_go_of_horse()

    # -- the horse ----------------------------------------------------------------------------

    def _let_go_of_horse(self) -> None:
        """Stop a horse the monitor stopped watching without reaping it (RQ resets
        ``horse_pid`` once it has): at its next step boundary, or killed after the grace."""
        pid = self.horse_pid
        if not pid:
            return
        log.warning(
            "the worker stopped watching work horse %d: asking it to stop at its next step "
            "boundary (killed in %.0fs otherwise)",
            pid,
            HORSE_STOP_GRACE_S,
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + HORSE_STOP_GRACE_S
        try:
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    log.error("work horse %d did not stop in time: killing it", pid)
                    self.kill_horse(signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.05)
        except ChildProcessError:  # already reaped
            pass
        self._horse_pid = 0

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        # The horse never returns from this call (it exits inside it), so it keeps its copy
        # of the lock held: harmless, it never scans. The stop signals stay blocked across the
        # fork: a stop forwarded to a horse that has not yet installed its handlers (SIGUSR1's
        # default action is to terminate) waits until it has (setup_work_horse_signals).
        self._watcher_pid = os.getpid()
        prepare, self._before_first_fork = self._before_first_fork, None
        if prepare is not None:
            prepare()
        with self._no_fork:
            signal.pthread_sigmask(signal.SIG_BLOCK, _HORSE_STOP_SIGNALS)
            try:
                super().fork_work_horse(job, queue)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _HORSE_STOP_SIGNALS)

    def setup_work_horse_signals(self) -> None:
        # Right after the fork: a forwarded stop must not kill a horse that has not yet
        # reached run_wake (SIGUSR1's default action is to terminate).
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]
        _die_with(self._watcher_pid)
        from fxdurable.workers.rq_job import note_early_stop

        signal.signal(signal.SIGUSR1, note_early_stop)
        signal.signal(signal.SIGTERM, note_early_stop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HORSE_STOP_SIGNALS)  # see fork_work_horse


def _die_with(parent: int) -> None:
    """In a fresh horse: have Linux SIGKILL it when ``parent`` (the worker, whose main thread
    forked it) dies, so a worker killed outright leaves no horse running a turn that its
    lease no longer covers once recovered elsewhere. Elsewhere than Linux: a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the worker died before the request took effect
        os._exit(137)


class FxdSimpleWorker(FxdWorkerMixin, rq.SimpleWorker):
    """RQ's non-forking worker (``fxdurable worker --no-fork``): each job runs in the worker
    process itself, in its warm context (:mod:`fxdurable.workers.warm`). A warm stop reaches
    the running job through its signal handlers (:func:`fxdurable.workers.rq_job.run_wake`
    passes it on here); a SIGKILL of the worker kills the turn with it, which the session's
    lease and recovery handle as any crash."""
