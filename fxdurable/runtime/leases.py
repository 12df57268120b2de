"""What a run may still do once it cannot renew its lease: nothing, by the time it expires.

Fencing refuses a stale holder's *writes*, not its *effects* (DESIGN §3.9, §9 "a cancelled
thread still runs"). When the heartbeat cannot renew a lease it cancels the run
``lease_margin_s`` before the lease expires; an async tool stops at its next ``await``, but a
sync tool runs in a thread that cancellation does not reach. So every execution of a tool's
code (a sync tool's thread, a durable tool's sync step) is tracked here per run, and a
process-wide watchdog thread (:class:`_Guard`, independent of the event loop, which a
misbehaving async tool may block) checks each run at its *stop deadline*, half the margin
before the lease expires: if anything of the run still executes then, it escalates with the
run's :data:`OnLostLease` policy. The default, ``"exit"``, ends the process at once
(``os._exit(LOST_LEASE_EXIT_STATUS)``, after one line on stderr and nothing else recorded):
the only stop a thread cannot ignore. So whatever another worker observes after taking the
lease over is final.

A run that ends keeps its lease until none of its tool code executes (a call past its
``timeout_s`` or aborted runs on in its thread): :meth:`GuardedRun.wait_idle`, awaited by the
worker before it releases the lease, renewed meanwhile.

A tool sees its lease through ``ctx.lease`` (:class:`LeaseView`): whether it is still held and
when it expires, as the heartbeat last renewed it (no store I/O), so a long tool can stop at
a safe point instead of being cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, ParamSpec, TypeAlias, TypeVar

from fxdurable.errors import LeaseLostError

__all__ = [
    "LOST_LEASE_EXIT_STATUS",
    "LeaseView",
    "LostLease",
    "OnLostLease",
    "run_sync",
]

log = logging.getLogger("fxdurable.worker")

P = ParamSpec("P")
R = TypeVar("R")

#: The status a process exits with when a run that lost its lease was still executing at its
#: stop deadline (EX_TEMPFAIL: the work is recovered elsewhere; a supervisor restarts us).
LOST_LEASE_EXIT_STATUS = 75


@dataclass(frozen=True, slots=True)
class LostLease:
    """What :data:`OnLostLease` is told: the session whose lease could not be renewed, what
    of its run still executes (tool names, sync ones first), and how long until the lease
    expires (it may be negative: the event loop was blocked)."""

    session_id: str
    executing: tuple[str, ...]
    expires_in_s: float


#: ``"exit"`` (the default everywhere): end the process at once. A callable (an embedder's own
#: stop, e.g. killing the process a tool drives) is called in the watchdog's thread; if it
#: returns while the run still executes, the guarantee is broken and that is logged.
OnLostLease: TypeAlias = Literal["exit"] | Callable[[LostLease], None]


class LeaseView:
    """A read-only view of the lease a tool call runs under (``ctx.lease``), kept up to date
    by the heartbeat; reading it costs no store round trip.

    ``held`` turns False as soon as the heartbeat gives up (it could not renew in time, or
    another worker took the session over): stop at the next safe point and return, or raise;
    the call is recorded by the next owner according to its replay policy. ``expires_at`` is
    the lease's expiry on the runtime's clock (``time.time()`` by default), None outside a
    runtime; :meth:`remaining_s` is the time left before the run is stopped for good."""

    __slots__ = ("_expires_at", "_held", "_margin_s", "_stop_at")

    def __init__(
        self, *, expires_at: float | None = None, stop_at: float = math.inf, margin_s: float = 0.0
    ) -> None:
        self._held = True
        self._expires_at = expires_at
        self._stop_at = stop_at  # time.monotonic() of the stop deadline
        self._margin_s = margin_s

    @property
    def held(self) -> bool:
        return self._held

    @property
    def expires_at(self) -> float | None:
        return self._expires_at

    def remaining_s(self) -> float:
        """Seconds until this run is stopped whatever it does (its stop deadline, half the
        margin before expiry); ``inf`` outside a runtime, 0 once the lease is not held."""
        if not self._held:
            return 0.0
        return max(0.0, self._stop_at - time.monotonic())

    def __repr__(self) -> str:
        return f"LeaseView(held={self._held}, expires_at={self._expires_at})"

    # -- the heartbeat's side ------------------------------------------------------------------

    def _renewed(self, *, expires_at: float, expires_mono: float) -> None:
        self._expires_at = expires_at
        self._stop_at = expires_mono - self._margin_s / 2

    def _lost(self) -> None:
        self._held = False


class GuardedRun:
    """One claim's run: its lease view, the tool code it is executing, and its policy."""

    def __init__(self, session_id: str, view: LeaseView, on_lost_lease: OnLostLease) -> None:
        self.session_id = session_id
        self.view = view
        self.on_lost_lease = on_lost_lease
        self.work_done = False  # set on the loop once the run's task has ended
        self._lock = threading.Lock()
        self._executing: dict[int, str] = {}  # a started execution's key -> its tool name
        self._next = 0
        self._refused = False  # past the stop deadline, or released: nothing may start
        # Futures of :meth:`wait_idle`, each on its loop, resolved when nothing executes.
        self._idle_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def ended(self) -> None:
        """The run's task has ended (on the loop): only its sync executions may remain."""
        self.work_done = True

    def lost_now(self) -> None:
        """Another worker took the lease over: what still executes has half the margin to
        end (a cancelled async tool unwinds), not until our estimate of the expiry."""
        self.view._lost()
        self.view._stop_at = min(self.view._stop_at, time.monotonic() + self.view._margin_s / 2)
        if _guard is not None and _guard.pid == os.getpid():
            _guard.add(self)  # wakes the watchdog to its new, earlier deadline

    def executing(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._executing.values())

    def still_executing(self) -> tuple[str, ...]:
        """What of the run still runs: its sync executions, and ``"the turn's task"`` while
        that task has not ended (an async tool that has not returned from its cancellation,
        or an event loop that is blocked)."""
        running = self.executing()
        return running if self.work_done else (*running, "the turn's task")

    def _begin(self, name: str) -> int | None:
        with self._lock:
            if self._refused:
                return None
            self._next += 1
            self._executing[self._next] = name
            return self._next

    def _end(self, key: int) -> None:
        with self._lock:
            self._executing.pop(key, None)
            if self._executing:
                return
            waiters, self._idle_waiters = self._idle_waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
                loop.call_soon_threadsafe(_resolve, waiter)

    async def wait_idle(self) -> None:
        """Return once none of the run's tool code executes, refusing any more to start (a
        thread the pool picks up only now does not run): the run's task has ended, and what
        a call past its ``timeout_s`` or an abort left running must end before the lease
        is let go (:meth:`fxdurable.runtime.worker.WakeHandler.handle`)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._refused = True
            if not self._executing:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._idle_waiters.append((loop, waiter))
        await waiter

    def _refuse_new(self) -> None:
        with self._lock:
            self._refused = True


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_current: contextvars.ContextVar[GuardedRun | None] = contextvars.ContextVar(
    "fxdurable_guarded_run", default=None
)


def enter_run(run: GuardedRun) -> None:
    """Called at the start of the run's task: tasks it creates (tool calls) inherit it."""
    _current.set(run)


def current_lease() -> LeaseView:
    run = _current.get()
    return run.view if run is not None else LeaseView()


async def run_sync(fn: Callable[P, R], name: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run a tool's blocking code (``fn``) in a thread, as ``asyncio.to_thread`` does, and
    track it in the current run so that the guard knows it is still executing. A call the
    thread pool starts only after the run's stop deadline does not run at all."""
    run = _current.get()
    if run is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    context = contextvars.copy_context()

    def execute() -> R:
        key = run._begin(name)
        if key is None:
            raise LeaseLostError(f"{name} did not start: its run's lease could not be renewed")
        try:
            return context.run(fn, *args, **kwargs)
        finally:
            run._end(key)

    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, execute)


# -- the watchdog ------------------------------------------------------------------------------


class _Guard:
    """One daemon thread per process that checks every guarded run at its stop deadline."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._cond = threading.Condition()
        self._runs: set[GuardedRun] = set()
        self._thread = threading.Thread(target=self._watch, name="fxd-lease-guard", daemon=True)
        self._thread.start()

    def add(self, run: GuardedRun) -> None:
        with self._cond:
            self._runs.add(run)
            self._cond.notify()

    def discard(self, run: GuardedRun) -> None:
        with self._cond:
            self._runs.discard(run)

    def _watch(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [r for r in self._runs if r.view._stop_at <= now]
                self._runs.difference_update(due)
                if not due:
                    wait = min((r.view._stop_at for r in self._runs), default=math.inf) - now
                    self._cond.wait(None if wait == math.inf else max(wait, 0.001))
                    continue
            for run in due:
                _at_deadline(run)


def _exit_now(status: int, line: str) -> None:
    os._exit(status)


# How "exit" ends the process. A seam for a test process that must outlive a run it hosts (a
# pytest worker: tests/conftest.py puts a stand-in there that fails the test instead); a
# stand-in that returns leaves the run's code executing, so nothing else may use it.
exit_process: Callable[[int, str], None] = _exit_now


def _at_deadline(run: GuardedRun) -> None:
    """The run's stop deadline passed without a renewal: nothing of it may run on."""
    run._refuse_new()
    run.view._lost()
    executing = run.still_executing()
    if not executing:
        return
    expires_in = run.view._stop_at + run.view._margin_s / 2 - time.monotonic()
    lost = LostLease(run.session_id, executing, expires_in)
    if run.on_lost_lease == "exit":
        when = (
            f"{expires_in:.2f}s before it expires"
            if expires_in >= 0
            else f"{-expires_in:.2f}s after it expired (this process was stalled or frozen)"
        )
        line = (
            f"fxdurable: the lease on session {run.session_id} could not be renewed and "
            f"its run still executes ({', '.join(executing)}) {when}: "
            f"exiting this process (status {LOST_LEASE_EXIT_STATUS}) so that no effect of it "
            "lands after another worker takes the session over\n"
        )
        try:
            os.write(2, line.encode())
        finally:
            exit_process(LOST_LEASE_EXIT_STATUS, line)
        return  # only a test's stand-in for exit_process returns
    try:
        run.on_lost_lease(lost)
    except Exception:
        log.exception("on_lost_lease for session %s failed", run.session_id)
    still = run.still_executing()
    if still:
        log.error(
            "session %s: %s still executes after on_lost_lease returned; its effects may land "
            "after another worker takes the session over",
            run.session_id,
            ", ".join(still),
        )


_guard: _Guard | None = None
_guard_lock = threading.Lock()


def guard(run: GuardedRun) -> None:
    """Watch ``run`` until it ends (:func:`unguard`) or its stop deadline passes."""
    global _guard
    with _guard_lock:
        if _guard is None or _guard.pid != os.getpid():  # not inherited across a fork
            _guard = _Guard()
        _guard.add(run)


def unguard(run: GuardedRun) -> None:
    """The run let go of its lease (released it), once :meth:`GuardedRun.wait_idle` said none
    of its tool code executes any more."""
    run.view._lost()
    if _guard is not None and _guard.pid == os.getpid():
        _guard.discard(run)
