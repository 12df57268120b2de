"""What a worker process keeps from one wake to the next: its warm context.

Opening the store, building an event loop and its thread pool, connecting a queue client and a
:class:`~fxdurable.runtime.worker.WakeHandler` cost more than a short wake's own work. A
:class:`WarmContext` holds them for the life of a process: a ``fxdurable worker --no-fork``
runs every job in it, so the store's connections (one per pool thread), the model clients'
keep-alive connections and whatever the handler caches across wakes survive from job to job.

The context belongs to the process that made it (:func:`warm_context` looks it up by pid): a
forked work horse never touches its parent's sockets, loop or SQLite connections, it makes its
own. A process keeps its context from job to job only once it has said it runs many
(:func:`keep_warm`: ``fxdurable worker --no-fork``, which closes it at exit); anywhere else (a
forked horse, of ours or of stock ``rq worker``) the job closes it when it ends, as a one-job
process must: the close also waits for a tool still running in the thread pool (one an abort
or its ``timeout_s`` cancelled while the lease was held), so its effect happens or not as a
whole instead of being cut off by the horse's ``os._exit``. One whose run *lost* its lease
does not get to finish: the lease guard ends the horse at the run's stop deadline, before the
lease expires (:mod:`fxdurable.runtime.leases`, docs/leases.md). A job that ends with an
exception out of the loop (RQ's job timeout, raised from a signal handler) discards the
context: the next job starts from a fresh one rather than beside a half-finished task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from fxdurable.backends import open_queue, open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.queue import WakeQueue
from fxdurable.core.store import Store
from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.models import aclose_loaded_clients
from fxdurable.runtime.worker import WakeHandler, WorkerSettings
from fxdurable.workers.config import WorkerConfig

__all__ = ["WarmContext", "close_warm_context", "keep_warm", "keeps_warm", "warm_context"]

log = logging.getLogger("fxdurable.worker")

T = TypeVar("T")

#: How long closing waits for tasks a discarded context left running.
CLOSE_GRACE_S = 10.0


class WarmContext:
    """One process's store, queue client, event loop (with its default thread pool), agents
    and :class:`WakeHandler`, reused by every job the process runs (an RQ ``--no-fork``
    worker's jobs, or every message an SQS worker receives)."""

    def __init__(self, config: WorkerConfig) -> None:
        self.pid = os.getpid()
        self.config = config
        self.agents = {a.name: a for a in load_agents(config.agents_spec)}
        self.store: Store = open_store(config.store_url)
        self.queue: WakeQueue | None = None
        self.loop = asyncio.new_event_loop()
        try:
            self.settings = WorkerSettings.from_env()
            self.journal = Journal(self.store, SystemClock(), RandomIds())
            self.queue = open_queue(config.queue_url)
            self.handler = WakeHandler(
                self.journal, self.queue, self.agents, SystemClock(), self.settings
            )
        except BaseException:
            self.close()
            raise
        log.info("warm context of process %d ready (store %s)", self.pid, self.store.url)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on this context's loop, in this (the main) thread."""
        return self.loop.run_until_complete(work)

    def close(self) -> None:
        """Cancel what is left on the loop, close the model clients, the queue client, the
        thread pool, the loop and the store (which waits for each connection's call in flight).
        """
        loop = self.loop
        if loop.is_closed():
            return
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(
                    asyncio.wait_for(
                        asyncio.gather(*pending, return_exceptions=True), CLOSE_GRACE_S
                    )
                )
            loop.run_until_complete(aclose_loaded_clients())
            if self.queue is not None:
                loop.run_until_complete(self.queue.aclose())
            loop.run_until_complete(loop.shutdown_default_executor())
        except Exception:  # closing must not hide why the context was dropped
            log.warning("closing the worker's warm context failed", exc_info=True)
        finally:
            loop.close()
            self.store.close()


_context: WarmContext | None = None
_keep_warm_pid: int | None = None


def keep_warm() -> None:
    """This process runs many jobs: keep its context from one to the next."""
    global _keep_warm_pid
    _keep_warm_pid = os.getpid()


def keeps_warm() -> bool:
    """Whether this process (not merely its parent) said :func:`keep_warm`."""
    return _keep_warm_pid == os.getpid()


def warm_context() -> WarmContext:
    """This process's context, made from the environment (:class:`WorkerConfig`) on first use."""
    global _context
    if _context is None or _context.pid != os.getpid():
        # A context inherited through fork is the parent's: never used, never closed here.
        _context = WarmContext(WorkerConfig.from_env())
    return _context


def close_warm_context() -> None:
    """Close this process's context, if it has one; the next job makes a new one."""
    global _context
    context, _context = _context, None
    if context is not None and context.pid == os.getpid():
        with contextlib.suppress(Exception):
            context.close()
