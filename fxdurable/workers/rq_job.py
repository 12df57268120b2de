"""The RQ job: one wake of one session, in an RQ work horse (or a ``--no-fork`` worker).

It runs in the process's warm context (:mod:`fxdurable.workers.warm`: the store, queue
client, event loop and wake handler kept from job to job). It claims the session, runs it
until it rests or the job nears its timeout (minus a margin to commit, enqueue the
continuation and release the lease), then returns. SIGTERM or SIGUSR1 in the horse
(``fxdurable worker`` forwards a warm shutdown as SIGUSR1) stops it at the next step boundary.
A SIGKILL leaves the lease to the next wake, which takes it over at once on the same host (the
holder's pid is gone) or after the lease TTL elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from fxdurable.runtime import tracing
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.workers.config import job_budget
from fxdurable.workers.warm import close_warm_context, keeps_warm, warm_context

__all__ = ["job_budget", "run_wake"]

log = logging.getLogger("fxdurable.rq")

DEFAULT_TIMEOUT_S = 180.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

# A stop request (SIGUSR1/SIGTERM) that reached this work horse before run_wake started:
# ``fxdurable worker`` installs note_early_stop in the horse right after the fork.
_early_stop: str | None = None


def note_early_stop(signum: int, _frame: object) -> None:
    global _early_stop
    _early_stop = signal.Signals(signum).name


def run_wake(session_id: str, reason: str = "wake", trace_parent: str | None = None) -> str:
    """RQ entry point. Returns a one-line summary (RQ keeps no result: ``result_ttl=0``).
    ``trace_parent`` is the enqueuer's W3C traceparent, when traced."""
    import rq

    global _early_stop
    job = rq.get_current_job()
    timeout = float(job.timeout) if job is not None and job.timeout else DEFAULT_TIMEOUT_S
    budget = job_budget(timeout)
    if _early_stop is not None:
        budget.request_stop(_early_stop)
        _early_stop = None
    # From the first instruction on, a stop request (a warm shutdown forwarded as SIGUSR1, or a
    # SIGTERM) only asks for a stop at the next step boundary, even while the job starts up.
    with _stop_signals(budget):
        try:
            context = warm_context()
            with tracing.handling_wake(trace_parent):  # the job's task copies this context
                context.run(context.handler.handle(session_id, budget))
        except BaseException:
            close_warm_context()  # RQ's timeout, a crash of ours: the next job starts afresh
            raise
        if not keeps_warm():
            close_warm_context()  # a one-job process (a forked horse): see fxdurable.workers.warm
    log.info("wake %s (%s) done", session_id, reason)
    return f"woke {session_id} ({reason})"


@contextlib.contextmanager
def _stop_signals(budget: InvocationBudget) -> Iterator[None]:
    """SIGTERM and SIGUSR1 ask ``budget`` to stop, for the length of the job.

    A handler installed before (a ``--no-fork`` worker's own: the job runs in the worker
    process) is told too, so the worker stops after this job, and is back once the job ends.
    """
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}

    def on_stop(signum: int, frame: FrameType | None) -> None:
        budget.request_stop(signal.Signals(signum).name)
        chained = previous[signum]
        if callable(chained) and chained is not note_early_stop:
            chained(signum, frame)
            now = signal.getsignal(signum)
            if now is not on_stop:  # it moved on (RQ's second signal is a cold shutdown)
                previous[signum] = now
                signal.signal(signum, on_stop)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, on_stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
