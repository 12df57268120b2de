"""The RQ job: one wake of one session, inside an RQ work-horse process.

It claims the session, runs it until it rests or the job nears its timeout (minus a margin
to commit, enqueue the continuation and release the lease), then returns. SIGTERM or SIGUSR1
in the horse (``fxdurable worker`` forwards a warm shutdown as SIGUSR1) stops it at the next
step boundary. A SIGKILL leaves the lease to the next wake, which takes it over at once on the
same host (the holder's pid is gone) or after the lease TTL elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from fxdurable.backends import open_rq_queue, open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
from fxdurable.runtime import tracing
from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.models.http import aclose_clients
from fxdurable.runtime.worker import WakeHandler, WorkerSettings
from fxdurable.workers.config import WorkerConfig

__all__ = ["job_budget", "run_wake"]

log = logging.getLogger("fxdurable.rq")

DEFAULT_TIMEOUT_S = 180.0

# A stop request (SIGUSR1/SIGTERM) that reached this work horse before run_wake started:
# ``fxdurable worker`` installs note_early_stop in the horse right after the fork.
_early_stop: str | None = None


def note_early_stop(signum: int, _frame: object) -> None:
    global _early_stop
    _early_stop = signal.Signals(signum).name


def job_budget(timeout_s: float) -> InvocationBudget:
    """Keep a fifth of the job's time (at most 30 s) for the continuation hand-off."""
    return InvocationBudget(timeout_s, margin_s=min(30.0, timeout_s * 0.2))


def run_wake(session_id: str, reason: str = "wake", trace_parent: str | None = None) -> str:
    """RQ entry point. Returns a one-line summary (RQ keeps no result: ``result_ttl=0``).
    ``trace_parent`` is the enqueuer's W3C traceparent, when traced."""
    import rq

    tracing.set_wake_parent(trace_parent)  # asyncio.run below copies this context

    job = rq.get_current_job()
    timeout = float(job.timeout) if job is not None and job.timeout else DEFAULT_TIMEOUT_S
    budget = job_budget(timeout)
    if _early_stop is not None:
        budget.request_stop(_early_stop)
    # From the first instruction on, a stop request (a warm shutdown forwarded as SIGUSR1, or a
    # SIGTERM) only asks for a stop at the next step boundary, even while the job starts up.
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, lambda signum, _frame: budget.request_stop(signal.Signals(signum).name))
    config = WorkerConfig.from_env()
    agents = {a.name: a for a in load_agents(config.agents_spec)}
    store = open_store(config.store_url)
    queue = open_rq_queue(config.queue_url)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            loop.add_signal_handler(sig, budget.request_stop, signal.Signals(sig).name)
        handler = WakeHandler(
            Journal(store, SystemClock(), RandomIds()),
            queue,
            agents,
            SystemClock(),
            WorkerSettings.from_env(),
        )
        try:
            await handler.handle(session_id, budget)
        finally:
            await aclose_clients()
            await queue.aclose()

    try:
        asyncio.run(main())
    finally:
        store.close()
    log.info("wake %s (%s) done", session_id, reason)
    return f"woke {session_id} ({reason})"
