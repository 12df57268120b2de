"""``fxdurable worker``: an RQ worker for fxdurable wakes, plus the reconciliation scan.

It is stock RQ (a forked work horse per job; with ``--no-fork``, RQ's SimpleWorker running
each job in the worker process, warm from job to job) with a few hooks changed
(:mod:`fxdurable.workers.rq_worker_class`): a warm shutdown (the first SIGTERM or SIGINT) is
forwarded to the running job as SIGUSR1, so the turn stops at its next step boundary, commits,
enqueues a continuation and releases the lease, instead of RQ waiting for the whole job; and a
Redis outage is ridden out with retries and log lines, by busy and idle workers alike. Stock
``rq worker`` runs our jobs too; run ``fxdurable scan`` beside it, because RQ alone never
re-enqueues a wake for a session whose worker was killed.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

from fxdurable.backends import open_rq_queue
from fxdurable.errors import (
    ConfigurationError,
    QueueUnavailableError,
    StoreError,
    StoreUnavailableError,
)
from fxdurable.queues.rq import RqQueue
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.runtime.worker import WorkerSettings
from fxdurable.workers import scan
from fxdurable.workers.config import WorkerConfig

__all__ = ["run_worker", "scan_once"]

log = logging.getLogger("fxdurable.worker")


def scan_once(config: WorkerConfig, queue: RqQueue, *, quiet_s: float = 0.0) -> int:
    """One reconciliation scan onto the RQ queue (:func:`fxdurable.workers.scan.scan_once`)."""
    return scan.scan_once(
        config.store_url, lambda s: queue.enqueue_now(s, reason="reconcile"), quiet_s=quiet_s
    )


#: How often a worker waiting for Redis at start says so, and its longest pause between tries.
_WAITING_LOG_EVERY_S = 5.0
_WAITING_RETRY_MAX_S = 1.0


def _startup_scan(
    config: WorkerConfig,
    queue: RqQueue,
    quiet_s: float,
    connect_timeout_s: float | None,
    *,
    scans: bool = True,
) -> int | None:
    """The startup reconciliation once Redis answers: how many sessions it woke (0 without
    ``scans``: only Redis is waited for), or None if the worker was stopped (SIGINT, SIGTERM)
    while waiting.

    A worker started while Redis is down (a host booting its services in any order, Redis
    restarting) waits for it, as a running worker rides out the same outage, with a line every
    few seconds; ``connect_timeout_s`` makes it give up (ConfigurationError, exit status 2).
    Only unreachability is waited out: refused credentials fail at once."""
    from fxdurable.workers.rq_worker_class import REDIS_DOWN  # needs the redis extra

    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:  # RQ installs its own handlers once the worker starts
        signal.signal(sig, lambda _signum, _frame: stop.set())
    started = time.monotonic()
    last_line = -_WAITING_LOG_EVERY_S
    pause = 0.1
    try:
        while True:
            try:
                queue.check()
                return scan_once(config, queue, quiet_s=quiet_s) if scans else 0
            except (QueueUnavailableError, StoreUnavailableError, *REDIS_DOWN) as exc:
                waited = time.monotonic() - started
                if connect_timeout_s is not None and waited >= connect_timeout_s:
                    raise ConfigurationError(
                        f"gave up after {connect_timeout_s:g}s (--connect-timeout): {exc}"
                    ) from None
                if waited - last_line >= _WAITING_LOG_EVERY_S:
                    last_line = waited
                    limit = (
                        f"giving up after {connect_timeout_s:g}s"
                        if connect_timeout_s is not None
                        else "--connect-timeout SECONDS to give up"
                    )
                    log.warning(
                        "waiting for Redis before taking wakes (%.0fs so far; %s): %s",
                        waited,
                        limit,
                        exc,
                    )
                left = None if connect_timeout_s is None else connect_timeout_s - waited
                if stop.wait(pause if left is None else max(0.0, min(pause, left))):
                    log.warning("stopped while waiting for Redis")
                    return None
                pause = min(pause * 2, _WAITING_RETRY_MAX_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _scan_forever(
    config: WorkerConfig,
    queue: RqQueue,
    every_s: float,
    quiet_s: float,
    stop: threading.Event,
    no_fork: threading.Lock,
) -> None:
    from fxdurable.workers.rq_worker_class import REDIS_DOWN  # needs the redis extra

    while not stop.wait(every_s):
        try:
            with no_fork:  # see run_worker
                found = scan_once(config, queue, quiet_s=quiet_s)
            if found:
                log.info("reconciliation scan woke %d session(s)", found)
        except Exception as exc:  # keep scanning: a store hiccup must not end recovery
            if isinstance(exc, (StoreError, *REDIS_DOWN)):  # an outage: one line, no traceback
                log.warning("reconciliation scan failed (%s); retrying in %.1fs", exc, every_s)
            else:
                log.exception("reconciliation scan failed; retrying in %.1fs", every_s)


def run_worker(
    config: WorkerConfig,
    *,
    burst: bool = False,
    scan_interval_s: float = 5.0,
    name: str | None = None,
    fork: bool = True,
    connect_timeout_s: float | None = None,
) -> int:
    """Run until stopped (or, with ``burst``, until the queue is empty). Returns an exit code.

    ``fork=False`` runs each job in this process (``--no-fork``), in one warm context
    (:mod:`fxdurable.workers.warm`) closed when the worker exits. A Redis (the queue's, or a
    Redis store) that does not answer at start is waited for, ``connect_timeout_s`` at most
    (None: until it answers or the worker is stopped). ``scan_interval_s=0`` turns the
    reconciliation scan off, at start and after, as on the SQS and Postgres workers."""
    if scan_interval_s < 0:
        raise ConfigurationError("--scan-interval must be 0 (off) or a number of seconds")
    # Fail fast, before any job, on a bad FXD_AGENTS, lease setting or Redis URL.
    agents = load_agents(config.agents_spec)
    settings = WorkerSettings.from_env()
    config.export()  # forked job processes read their configuration from the environment
    queue = open_rq_queue(config.queue_url)
    # After every check: a bad setting is the first line a user reads, not an INFO line.
    announce_model_endpoints(agents, process="fxdurable worker")
    scans = scan_interval_s > 0
    found = _startup_scan(config, queue, settings.scan_quiet_s, connect_timeout_s, scans=scans)
    if found is None:
        return 0  # stopped while waiting for Redis: nothing was taken, nothing to hand back
    if found:
        log.info("startup reconciliation woke %d session(s)", found)
    stop = threading.Event()
    # The scan thread and RQ's fork of a work horse take turns. A fork while the scan is inside
    # the store's C library (SQLite's open and allocator take process-wide mutexes) gives the
    # horse a copy of a locked mutex that no thread of its own will ever unlock: it hangs in its
    # first store call until RQ kills it, job timeout + 60 s later. Every store call of the scan
    # is bounded (busy_timeout, socket timeouts), so a fork waits at most that long.
    no_fork = threading.Lock()
    if scans:  # 0 once scanned without a pause: a busy loop waking every orphan at once
        threading.Thread(
            target=_scan_forever,
            args=(config, queue, scan_interval_s, settings.scan_quiet_s, stop, no_fork),
            daemon=True,
            name="fxd-scan",
        ).start()
    # needs the redis extra
    from fxdurable.workers.rq_worker_class import FxdSimpleWorker, FxdWorker

    worker: Any = None
    try:
        # worker_ttl bounds RQ's blocking dequeue (ttl - 15 s), so a stop is noticed within
        # 5 s; the job monitor beats well inside that TTL while a long job runs.
        options: dict[str, Any] = {"name": name, "worker_ttl": 20, "job_monitoring_interval": 5}
        if fork:
            worker = FxdWorker(
                [queue.queue],
                connection=queue.queue.connection,
                no_fork=no_fork,
                before_first_fork=lambda: _prepare_horses(config, agents, queue),
                **options,
            )
        else:
            # Only a worker that runs jobs itself loads the runtime; a forking one leaves that
            # to its work horses, and registers with Redis without paying for it.
            from fxdurable.workers.warm import keep_warm

            keep_warm()
            worker = FxdSimpleWorker([queue.queue], connection=queue.queue.connection, **options)
        worker.work(burst=burst, with_scheduler=False)
    except Exception:
        if worker is None or not getattr(worker, "_stop_requested", False):
            raise
        # RQ stops an idle worker by raising from a signal handler, which can land inside a
        # Redis command and leave the connection out of step for RQ's own teardown. The stop
        # was asked for and the store is the truth: nothing is lost.
        log.warning("RQ failed while shutting down; exiting anyway", exc_info=True)
    finally:
        stop.set()
        from fxdurable.workers.warm import close_warm_context, release_horse_prep

        if fork:
            release_horse_prep()
        else:
            close_warm_context()
    return 0


def _prepare_horses(config: WorkerConfig, agents: list[Agent], queue: RqQueue) -> None:
    """Open and check the store once for every work horse (:func:`prepare_horses`). A store
    that stopped answering since the startup scan is left to the horses, which open it
    themselves and ride out its outage as any wake does."""
    from fxdurable.workers.warm import prepare_horses

    try:
        prepare_horses(config, agents, queue)
    except StoreUnavailableError as exc:
        log.warning(
            "the store did not answer before the first job (%s); each work horse opens it itself",
            exc,
        )
