"""The queue worker loop: ``fxdurable worker --queue sqs://...`` and ``--queue postgresql://...``.

The loop is this module's and knows no queue: each queue fills its primitives with a
:class:`QueueConsumer` (``receive``, ``extend``, ``delete``, optionally ``interrupt``;
SQS: :class:`fxdurable.workers.sqs_consumer.SqsConsumer`, PostgreSQL:
:class:`fxdurable.queues.postgres.PgConsumer`), as a result backend fills ``_get``/``_store``
under dramatiq's ``ResultBackend``. :mod:`fxdurable.workers.sqs_worker` and
:mod:`fxdurable.workers.postgres_worker` only open their consumer and name their settings.
Nothing here imports a queue's client: a Postgres worker runs without boto3.

One process, one event loop, warm from wake to wake (:mod:`fxdurable.workers.warm`: the
store, the queue client, the model clients and the :class:`~fxdurable.runtime.worker.WakeHandler`
are kept). It receives up to ``--concurrency`` wakes at a time (each receive waits up to
``<prefix>WAIT_S``) and, for each:

1. decodes it (:func:`~fxdurable.queues.wake_codec.decode_wake`). A body that is not a wake is
   logged and left alone: the queue dead-letters it after its maximum of deliveries. A queue
   without a dead-letter queue (an SQS queue without a redrive policy) has nowhere to put it,
   so there it is deleted once logged (it can never become a wake; kept, it would come back
   forever);
2. runs the session through the ``WakeHandler`` with a budget of ``<prefix>JOB_TIMEOUT_S``
   (900 s; a fifth of it, at most 30 s, is kept for the hand-off), while a background task
   extends the wake's visibility (to ``<prefix>VISIBILITY_S`` every third of it): the twin of
   the session lease's heartbeat. A failed extension is logged and retried at the next beat;
   it never stops the work, because the store's lease, not the message, decides who runs the
   session;
3. deletes the wake once the handler returns: the session is at rest, a continuation wake was
   enqueued (the budget ran out, or the worker is stopping), or the session belongs to another
   live worker (whose release re-checks for work in the same transaction) or to nobody this
   worker knows. If the handler fails (a store outage mid-turn, a bug in a hook), the wake is
   left for redelivery after a backoff (2, 4, 8 ... s, at most the visibility timeout), and
   after the queue's maximum of deliveries it is dead-lettered.

**Crashes.** A SIGKILLed worker deletes nothing: its wakes come back after their visibility
timeout, and the next worker takes the session's lease over at once on the same host (the
holder's pid is gone) or once the lease expires (``FXD_LEASE_TTL_S``) elsewhere, recording an
unsafe tool call that was in flight as ``outcome_unknown``. Each interruption costs the
submission one attempt: a wake that kills every worker that takes it (a poison message) makes
its submission settle ``failed`` (``attempts_exhausted``) once the agent's ``max_attempts``
are spent, and the session rests, even if the queue had dead-lettered the wake first: the
reconciliation scan below wakes the session again.

**Store outages.** A store away for longer than a session's lease stops that session's run
before the lease expires; if a tool's code is still executing at the run's stop deadline (a
sync tool's thread), the worker exits with status 75 (docs/leases.md): a thread cannot be
stopped otherwise, and its effect must not land after another worker takes the session over.
Run the worker under a supervisor that restarts it. A queue away (a failed receive) is ridden
out with backoff, 1 s doubling to 30 s.

**Reconciliation.** At start and every ``--scan-interval`` seconds (5; 0 turns it off) the
worker wakes every session with unsettled work and no live owner (:mod:`fxdurable.runtime.
reconcile`), as the RQ worker does. Redelivery covers a killed worker whose wake still
exists, but not a wake that was never sent (the submitter died after admitting), one that was
dead-lettered while its session still had work, or one deleted by a worker whose run was then
cut short by a lost lease. With the scan off, run ``fxdurable scan`` or a scheduled scan
handler instead.

**Stopping.** The first SIGTERM or SIGINT stops every running turn at its next step boundary:
it commits, enqueues a continuation, releases the lease; the worker deletes the wake and exits
0. An idle worker's receive is interrupted where the queue can (Postgres's LISTEN) and
otherwise returns within ``<prefix>WAIT_S`` (SQS's long poll); wakes that receive brings are
made visible again at once. A second SIGTERM or SIGINT exits at once (status 128 + the
signal), leaving leases and wakes to be recovered as after a crash.

With ``--burst`` it exits once a receive finds nothing and nothing is running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fxdurable.core.queue import WakeQueue
from fxdurable.errors import ConfigurationError, ConflictError, FxDurableError, QueueError
from fxdurable.queues.wake_codec import decode_wake
from fxdurable.runtime import tracing
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.runtime.reconcile import orphaned_sessions
from fxdurable.runtime.wake_conflicts import CONFLICT_HAND_ONS, handed_on_reason, handle_wake
from fxdurable.workers.config import WorkerConfig, job_budget
from fxdurable.workers.queue_settings import QueueLimits, QueueWorkerSettings
from fxdurable.workers.warm import WarmContext

__all__ = ["QueueBackend", "QueueConsumer", "QueueMessage", "QueueWorker", "run_queue_worker"]

# After a failed receive (the queue unreachable or throttling), wait this long, doubling to
# the max.
RECEIVE_RETRY_S = (1.0, 30.0)


class QueueMessage(Protocol):
    @property
    def message_id(self) -> str: ...
    @property
    def body(self) -> str: ...
    @property
    def receive_count(self) -> int: ...


class QueueConsumer(Protocol):
    """The primitives a queue fills for this loop. All block (the loop calls them in a
    thread) and raise :class:`~fxdurable.errors.QueueError` subclasses; ``extend`` and
    ``delete`` answer False when the delivery is no longer this worker's."""

    @property
    def where(self) -> str: ...  # the queue, for log lines (never a credential)
    def redrive_max_receives(self) -> int | None: ...  # None: no dead-letter queue
    def receive(self, max_messages: int, *, visibility_s: int) -> Sequence[Any]: ...
    def extend(self, message: Any, visibility_s: int) -> bool: ...
    def delete(self, message: Any) -> bool: ...
    def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueBackend:
    """One queue's part of a worker: its name in log lines, its logger, its settings' names
    and limits, its queue class, and how to open its consumer on the queue."""

    name: str  # "SQS", "Postgres"
    logger: str  # "fxdurable.sqs"
    scheme: str  # "sqs://", for the error naming a wrong queue
    limits: QueueLimits
    queue_type: type[WakeQueue]
    open_consumer: Callable[[Any, QueueWorkerSettings], QueueConsumer]
    # Ends a blocked receive at the first stop signal (Postgres's LISTEN); without one (SQS's
    # long poll) the receive returns within <prefix>WAIT_S.
    interrupt: Callable[[Any], None] | None = None
    # Run first, before the store and the queue are opened (SQS: quiet botocore's logging).
    prepare: Callable[[], None] | None = None


class QueueWorker:
    """The receive loop of one worker process, on its warm context's event loop; ``consumer``
    fills its primitives, ``backend`` names them."""

    def __init__(
        self,
        context: WarmContext,
        queue: WakeQueue,
        consumer: QueueConsumer,
        settings: QueueWorkerSettings,
        *,
        backend: QueueBackend,
        max_receives: int | None,
        burst: bool = False,
        scan_interval_s: float = 5.0,
    ) -> None:
        self._backend = backend.name
        self._log = logging.getLogger(backend.logger)
        self._interrupt = (
            None if backend.interrupt is None else functools.partial(backend.interrupt, consumer)
        )
        self._context = context
        self._queue = queue
        self._consumer = consumer
        self._settings = settings
        self._max_receives = max_receives  # the queue's; None: no dead-letter queue
        self._burst = burst
        self._scan_interval_s = scan_interval_s
        self._budgets: set[InvocationBudget] = set()
        self._running: set[asyncio.Task[None]] = set()
        self._stop_signal: str | None = None
        self._stopped = asyncio.Event()

    # -- the loop ----------------------------------------------------------------------------

    async def serve(self) -> int:
        """Receive and run wakes until stopped (or, with ``burst``, until the queue is empty).
        Returns the exit status."""
        loop = asyncio.get_running_loop()
        with _stop_signals(loop, self._on_stop_signal):
            scanner = None
            if self._scan_interval_s > 0:
                await self._scan("startup reconciliation")
                scanner = asyncio.ensure_future(self._scan_forever())
            self._log.info(
                "listening on %s queue %s (concurrency %d, wait %ds, visibility %ds, job "
                "timeout %gs, %s)",
                self._backend,
                self._consumer.where,
                self._settings.concurrency,
                self._settings.wait_s,
                self._settings.visibility_s,
                self._settings.job_timeout_s,
                f"dead-letter queue after {self._max_receives} receives"
                if self._max_receives
                else "no dead-letter queue",
            )
            try:
                await self._receive_until_stopped()
                if self._running:
                    await asyncio.gather(*self._running, return_exceptions=True)
            finally:
                if scanner is not None:
                    scanner.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await scanner
        self._log.info("worker stopped%s", f" ({self._stop_signal})" if self._stop_signal else "")
        return 0

    async def _receive_until_stopped(self) -> None:
        pause = RECEIVE_RETRY_S[0]
        while not self._stopped.is_set():
            free = self._settings.concurrency - len(self._running)
            if free <= 0:
                await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                messages = await asyncio.to_thread(
                    self._consumer.receive, free, visibility_s=self._settings.visibility_s
                )
            except QueueError as exc:  # the queue away or throttling: ride it out, as RQ's does
                self._log.warning(
                    "receiving from %s failed (%s); retrying in %gs", self._backend, exc, pause
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), pause)
                pause = min(pause * 2, RECEIVE_RETRY_S[1])
                continue
            pause = RECEIVE_RETRY_S[0]
            if self._stopped.is_set():
                # Stopping: what this poll brought goes back at once, for another worker.
                for message in messages:
                    await asyncio.to_thread(self._consumer.extend, message, 0)
                return
            if not messages and self._burst and not self._running:
                return
            for message in messages:
                task = asyncio.ensure_future(self._handle(message))
                self._running.add(task)
                task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # _handle logs what it expects; anything else is a bug of ours, said loudly. The
            # message was not deleted: the queue delivers it again.
            self._log.error("handling a message failed", exc_info=task.exception())

    # -- one message -------------------------------------------------------------------------

    async def _handle(self, message: QueueMessage) -> None:
        try:
            session_id, reason, trace_parent = decode_wake(message.body)
        except QueueError as exc:
            await self._not_a_wake(message, exc)
            return
        budget = job_budget(self._settings.job_timeout_s)
        if self._stop_signal is not None:
            budget.request_stop(self._stop_signal)
        self._budgets.add(budget)
        keeper = asyncio.ensure_future(self._keep_invisible(message))
        started = time.monotonic()
        try:
            with tracing.handling_wake(trace_parent):
                await handle_wake(self._context.handler, session_id, budget)
        except ConflictError as exc:
            # Still conflicting after runs from fresh reads: a fresh wake, not a redelivery
            # (whose receive count leads to the dead-letter queue).
            if not await self._pass_on(session_id, reason, exc):
                await self._retry_later(message, session_id, exc)
                return
        except Exception as exc:
            await self._retry_later(message, session_id, exc)
            return
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            self._budgets.discard(budget)
        deleted = await self._delete(message)
        self._log.info(
            "wake %s (%s) done in %.2fs, delivery %d%s",
            session_id,
            reason,
            time.monotonic() - started,
            message.receive_count,
            "" if deleted else f"; its receipt had lapsed ({self._backend} delivers it again)",
        )

    async def _keep_invisible(self, message: QueueMessage) -> None:
        """Extend the message's visibility every third of the timeout while its wake runs."""
        visibility = self._settings.visibility_s
        while True:
            await asyncio.sleep(visibility / 3)
            try:
                kept = await asyncio.to_thread(self._consumer.extend, message, visibility)
            except FxDurableError as exc:
                self._log.warning("could not extend message %s (%s)", message.message_id, exc)
                continue
            if not kept:
                # Another delivery of it exists now; that copy finds the lease held and is
                # dropped, or runs after our release. Nothing to extend any more.
                self._log.warning(
                    "message %s was delivered again while its wake ran", message.message_id
                )
                return

    async def _delete(self, message: QueueMessage) -> bool:
        try:
            return await asyncio.to_thread(self._consumer.delete, message)
        except FxDurableError as exc:
            # It comes back after its visibility timeout; the store makes that wake harmless.
            self._log.warning("could not delete message %s (%s)", message.message_id, exc)
            return False

    async def _pass_on(self, session_id: str, reason: str, exc: ConflictError) -> bool:
        """Hand a still-conflicting wake on as a fresh one; False once it was handed on
        CONFLICT_HAND_ONS times, or the send failed (the message is retried, towards the
        dead-letter queue)."""
        handed_on = handed_on_reason(reason)
        if handed_on is None:
            self._log.error(
                "wake %s still conflicts (%s) after %d fresh wakes; left to %s redelivery",
                session_id,
                exc,
                CONFLICT_HAND_ONS,
                self._backend,
            )
            return False
        self._log.warning(
            "wake %s still conflicts (%s); passed on as a fresh wake", session_id, exc
        )
        try:
            await self._queue.enqueue(session_id, reason=handed_on)
        except FxDurableError as send_exc:
            self._log.warning("could not pass the wake for %s on: %s", session_id, send_exc)
            return False
        return True

    async def _retry_later(self, message: QueueMessage, session_id: str, exc: Exception) -> None:
        delay = min(2 ** min(message.receive_count, 16), self._settings.visibility_s)
        self._log.error(
            "wake %s failed on delivery %d (%s: %s); %s delivers it again in %ds%s",
            session_id,
            message.receive_count,
            type(exc).__name__,
            exc,
            self._backend,
            delay,
            self._dead_letter_note(message),
            exc_info=not isinstance(exc, FxDurableError),
        )
        with contextlib.suppress(FxDurableError):
            await asyncio.to_thread(self._consumer.extend, message, delay)

    async def _not_a_wake(self, message: QueueMessage, exc: QueueError) -> None:
        if self._max_receives is None:
            self._log.error(
                "message %s is not a wake (%s); deleted (the queue has no dead-letter queue)",
                message.message_id,
                exc,
            )
            await self._delete(message)
            return
        self._log.error(
            "message %s is not a wake (%s); left for the dead-letter queue%s",
            message.message_id,
            exc,
            self._dead_letter_note(message),
        )

    def _dead_letter_note(self, message: QueueMessage) -> str:
        if self._max_receives is None:
            return ""
        return f" (delivery {message.receive_count} of {self._max_receives})"

    # -- reconciliation ----------------------------------------------------------------------

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(self._scan_interval_s)
            await self._scan("reconciliation scan")

    async def _scan(self, what: str) -> None:
        quiet_s = self._context.settings.scan_quiet_s
        try:
            now = time.time()
            found = await durable(
                self._context.journal.read,
                lambda v: orphaned_sessions(v, now=now, quiet_s=quiet_s),
            )
            for session_id in found:
                await self._queue.enqueue(session_id, reason="reconcile")
        except Exception as exc:  # keep scanning: a store or queue hiccup must not end recovery
            self._log.warning("%s failed (%s: %s); retrying later", what, type(exc).__name__, exc)
            return
        if found:
            self._log.info("%s woke %d session(s)", what, len(found))

    # -- stopping ----------------------------------------------------------------------------

    def _on_stop_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._stop_signal is not None:
            # A second stop: exit now, as after a crash (leases expire, messages reappear).
            os.write(2, f"fxdurable worker: second {name}, exiting at once\n".encode())
            os._exit(128 + signum)
        self._stop_signal = name
        self._log.warning(
            "%s: stopping; %d running wake(s) stop at their next step boundary",
            name,
            len(self._budgets),
        )
        for budget in self._budgets:
            budget.request_stop(name)
        self._stopped.set()
        if self._interrupt is not None:
            interrupt = self._interrupt

            def quietly() -> None:
                with contextlib.suppress(FxDurableError):  # the wait ends at its poll anyway
                    interrupt()

            asyncio.get_running_loop().run_in_executor(None, quietly)


@contextlib.contextmanager
def _stop_signals(
    loop: asyncio.AbstractEventLoop, on_stop: Callable[[int], None]
) -> Iterator[None]:
    sigs = (signal.SIGTERM, signal.SIGINT)
    for sig in sigs:
        loop.add_signal_handler(sig, on_stop, sig)
    try:
        yield
    finally:
        for sig in sigs:
            loop.remove_signal_handler(sig)


def run_queue_worker(
    config: WorkerConfig,
    backend: QueueBackend,
    *,
    burst: bool = False,
    scan_interval_s: float = 5.0,
    concurrency: int = 1,
) -> int:
    """Run until stopped (or, with ``burst``, until the queue is empty). Returns an exit code.
    Fails fast, before any wake, on a bad setting, a missing queue or store, or refused
    access."""
    if backend.prepare is not None:
        backend.prepare()
    settings = QueueWorkerSettings.from_env(backend.limits, concurrency=concurrency)
    if scan_interval_s < 0:
        raise ConfigurationError("--scan-interval must be 0 (off) or a number of seconds")
    context = WarmContext(config)
    consumer: QueueConsumer | None = None
    try:
        queue = context.queue
        if not isinstance(queue, backend.queue_type):
            raise ConfigurationError(
                f"a {backend.name} worker needs a {backend.scheme} queue: {config.queue_url}"
            )
        consumer = backend.open_consumer(queue, settings)
        # The first line of the log at the default level, once the configuration has passed.
        announce_model_endpoints(
            context.agents.values(), process=f"fxdurable worker ({backend.name})"
        )
        # Also checks, before any wake, that the queue exists and may be read.
        max_receives = consumer.redrive_max_receives()
        if max_receives is None:
            logging.getLogger(backend.logger).warning(
                "the %s queue %s has no dead-letter queue: a message that is not a wake is "
                "deleted once logged, and a wake that keeps failing is retried until the "
                "session's attempts are spent",
                backend.name,
                consumer.where,
            )
        worker = QueueWorker(
            context,
            queue,
            consumer,
            settings,
            backend=backend,
            max_receives=max_receives,
            burst=burst,
            scan_interval_s=scan_interval_s,
        )
        return context.run(worker.serve())
    finally:
        if consumer is not None:
            consumer.close()
        context.close()
