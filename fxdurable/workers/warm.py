"""What a worker process keeps from one wake to the next: its warm context.

Opening the store, building an event loop and its thread pool, connecting a queue client and a
:class:`~fxdurable.runtime.worker.WakeHandler` cost more than a short wake's own work. A
:class:`WarmContext` holds them for the life of a process: a ``fxdurable worker --no-fork``
runs every job in it, so the store's connections (one per pool thread), the model clients'
keep-alive connections and whatever the handler caches across wakes survive from job to job.

The context belongs to the process that made it (:func:`warm_context` looks it up by pid): a
forked work horse never touches its parent's loop or SQLite connections, it makes its own. What
may cross a fork is made once by the forking worker instead (:func:`prepare_horses`): the
settings, the caches a first step fills, the queue client and, when it survives a
fork, the store itself (Redis); a SQLite store's schema is checked there once and each horse
opens its own connections without checking it again. A process keeps its context from job to
job only once it has said it runs many (:func:`keep_warm`: ``fxdurable worker --no-fork``,
which closes it at exit); anywhere else (a forked horse, of ours or of stock ``rq worker``) the
job closes it when it ends, as a one-job process must: the close also waits for a tool still
running in the thread pool (one an abort or its ``timeout_s`` cancelled while the lease was
held), so its effect happens or not as a whole instead of being cut off by the horse's
``os._exit``. One whose run *lost* its lease does not get to finish: the lease guard ends the
horse at the run's stop deadline, before the lease expires (:mod:`fxdurable.runtime.leases`,
docs/leases.md). A job that ends with an exception out of the loop (RQ's job timeout, raised
from a signal handler) discards the context: the next job starts from a fresh one rather than
beside a half-finished task.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fxdurable.backends import open_queue, open_store
from fxdurable.core import records
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.queue import WakeQueue
from fxdurable.core.recordcodec import compile_codecs
from fxdurable.core.store import Store
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.models import aclose_loaded_clients
from fxdurable.runtime.subagent import with_delegates
from fxdurable.runtime.worker import WakeHandler, WorkerSettings
from fxdurable.workers.config import WorkerConfig
from fxdurable.workers.rq_sqlite_keeper import SqliteKeeper

__all__ = [
    "HorsePrep",
    "WarmContext",
    "close_warm_context",
    "keep_warm",
    "keeps_warm",
    "prepare_horses",
    "release_horse_prep",
    "warm_context",
]

log = logging.getLogger("fxdurable.worker")

T = TypeVar("T")

#: How long closing waits for tasks a discarded context left running.
CLOSE_GRACE_S = 10.0


class WarmContext:
    """One process's store, queue client, event loop (with its default thread pool), agents
    and :class:`WakeHandler`, reused by every job the process runs (an RQ ``--no-fork``
    worker's jobs, or every message an SQS worker receives)."""

    def __init__(self, config: WorkerConfig, *, prepared: HorsePrep | None = None) -> None:
        """``prepared``: what the forking worker this process is a horse of made once for all
        its horses (:func:`prepare_horses`); without it, everything is made here."""
        self.pid = os.getpid()
        self.config = config
        self.queue: WakeQueue | None = None
        # The agents are loaded here even in a horse: the module is the worker's (imported
        # before the fork), but a function FXD_AGENTS names is called once per process that
        # runs jobs, as it always was (it may set up per-job state; the crash suites arm
        # their next crash there).
        self.agents = {a.name: a for a in load_agents(config.agents_spec)}
        # A store the worker made for its horses is left open at the horse's end (see close).
        self._owns_store = prepared is None or prepared.store is None
        if prepared is not None:
            self.settings = prepared.settings
            self.store: Store = prepared.store or open_store(config.store_url, schema_checked=True)
        else:
            self.settings = WorkerSettings.from_env()
            self.store = open_store(config.store_url)
        self.loop = asyncio.new_event_loop()
        self._pool = ReusingThreadPool(thread_name_prefix="fxd-pool")
        self.loop.set_default_executor(self._pool)
        try:
            self.journal = Journal(self.store, SystemClock(), RandomIds())
            if prepared is not None and prepared.queue is not None:
                self.queue = prepared.queue
            else:
                self.queue = open_queue(config.queue_url)
            self.handler = WakeHandler(
                self.journal, self.queue, self.agents, SystemClock(), self.settings
            )
        except BaseException:
            self.close()
            raise
        if prepared is None:
            log.info("warm context of process %d ready (store %s)", self.pid, self.store.url)
        else:
            log.info(
                "warm context of work horse %d ready (store %s, %s)",
                self.pid,
                self.store.url,
                "the worker's" if prepared.store is not None else "schema checked by the worker",
            )

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
            # Here, not in a thread of its own as loop.shutdown_default_executor() would: the
            # loop runs nothing meanwhile, and a horse starts one thread less.
            self._pool.shutdown(wait=True)
        except Exception:  # closing must not hide why the context was dropped
            log.warning("closing the worker's warm context failed", exc_info=True)
        finally:
            loop.close()
            # The worker's store in its horse (Redis), once the pool has no call left in flight,
            # is the horse's to drop at its exit, not to close: closing it stops its pub/sub
            # subscriber, which waits out the receive in progress (up to half a second, more
            # than the whole turn), and closes sockets the exit closes anyway.
            if self._owns_store:
                self.store.close()


@dataclass(frozen=True, slots=True)
class HorsePrep:
    """What a forking worker makes once, before its first fork, for every work horse.

    ``settings`` is a plain object a fork copies. ``store`` is the worker's own
    store when it survives a fork (:data:`_FORK_SAFE_STORES`), else None: each horse then
    opens the store itself, without the schema check the worker already made. ``queue`` is the
    worker's queue client (redis-py reconnects in a new process: its pool checks the pid).
    The worker itself never uses ``store``, so every horse starts from the same copy of it.
    ``keeper`` holds a SQLite database open between horses, so that no horse's close is its
    last one (:mod:`fxdurable.workers.rq_sqlite_keeper`).
    """

    pid: int
    settings: WorkerSettings
    store: Store | None
    queue: WakeQueue | None
    keeper: SqliteKeeper | None = None


#: Stores whose client a forked process may go on using: the Redis store holds only a redis-py
#: connection pool, which drops the parent's connections in a child (it checks the pid) and
#: opens its own. Not SQLite (a connection must never cross a fork: SQLite's POSIX locks are
#: per process, https://sqlite.org/howtocorrupt.html#fork) nor DynamoDB (boto3's clients are
#: not fork-safe).
_FORK_SAFE_STORES = ("redis", "rediss")

_context: WarmContext | None = None
_keep_warm_pid: int | None = None
_prepared: HorsePrep | None = None


def prepare_horses(config: WorkerConfig, agents: list[Agent], queue: WakeQueue | None) -> None:
    """In a forking worker, before its first fork: open the store once (its schema checked or
    migrated here, not in every horse) and keep what every horse would otherwise make again.
    ``agents`` (the worker's) only fill the caches their tools' first use would fill in each
    horse; a tool's input schema is cached by its model class, so a horse's own agents (the
    same classes, from the module the worker imported) find it built.

    A store that must not cross a fork (SQLite) is closed again at once, so no connection of
    it exists when RQ forks; its horses open it without a second check, and a keeper process
    holds the database open between them."""
    global _prepared
    _warm_caches(agents)
    store: Store | None = open_store(config.store_url)
    assert store is not None
    keeper = None
    if config.store_url.split(":", 1)[0] not in _FORK_SAFE_STORES:
        database = getattr(store, "path", None)  # a SQLite store's file
        if config.store_url.startswith("sqlite:") and isinstance(database, Path):
            keeper = SqliteKeeper(database)
        store.close()
        store = None
    _prepared = HorsePrep(os.getpid(), WorkerSettings.from_env(), store, queue, keeper)


def _warm_caches(agents: list[Agent]) -> None:
    """Fill, once in the worker, the caches every horse would otherwise fill again at its
    first step: each record type's codec and each tool's input schema (pydantic builds a JSON
    schema in about a millisecond, resolving a record's type hints takes as long)."""
    for agent in with_delegates(agents):
        for tool in agent.tools:
            tool.json_schema()
    compile_codecs(
        *(
            value
            for value in vars(records).values()
            if isinstance(value, type) and dataclasses.is_dataclass(value)
        )
    )


def release_horse_prep() -> None:
    """The worker is done forking: close what :func:`prepare_horses` kept open."""
    global _prepared
    prepared, _prepared = _prepared, None
    if prepared is None or prepared.pid != os.getpid():
        return
    if prepared.store is not None:
        with contextlib.suppress(Exception):
            prepared.store.close()
    if prepared.keeper is not None:
        prepared.keeper.close()


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
        # What the parent prepared for its horses is used, in a horse only (never its maker).
        prepared = _prepared if _prepared is not None and _prepared.pid != os.getpid() else None
        _context = WarmContext(WorkerConfig.from_env(), prepared=prepared)
    return _context


def close_warm_context() -> None:
    """Close this process's context, if it has one; the next job makes a new one."""
    global _context
    context, _context = _context, None
    if context is not None and context.pid == os.getpid():
        with contextlib.suppress(Exception):
            context.close()


class ReusingThreadPool(ThreadPoolExecutor):
    """A thread pool that starts a thread only when every thread it has is busy.

    CPython's pool starts one whenever no thread has *said* it is idle, and a thread says so
    only after the call's result has woken the loop, which by then has often submitted the
    next call: a turn's sequential store calls started three or four threads per work horse,
    each with its own SQLite connection. Here a call counts as running until its result is
    set (its future's first done callback, which runs before the loop is woken), so the next
    call goes to the thread that just finished it; concurrent calls (a heartbeat beside a
    commit, parallel tools) still get threads of their own, up to ``max_workers``.
    """

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        super().__init__(max_workers, thread_name_prefix)
        self._running = 0
        self._running_lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with self._running_lock:
            self._running += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._finished(None)
            raise
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: object) -> None:
        with self._running_lock:
            self._running -= 1

    def _adjust_thread_count(self) -> None:
        if self._running <= len(self._threads):
            return  # a thread is free, or about to be: it takes the call from the queue
        # Every thread is busy: start one (CPython's check of its idle count would not).
        while self._idle_semaphore.acquire(timeout=0):
            pass
        super()._adjust_thread_count()
