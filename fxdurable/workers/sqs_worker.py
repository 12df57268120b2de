"""``fxdurable worker --queue sqs://...``: a long-running SQS poller that runs fxdurable wakes.

One process, one event loop, warm from message to message (:mod:`fxdurable.workers.warm`: the
store, the queue client, the model clients and the :class:`~fxdurable.runtime.worker.WakeHandler`
are kept). It long-polls the queue (``ReceiveMessage``, up to ``FXD_SQS_WAIT_S`` seconds) for
up to ``--concurrency`` messages at a time and, for each:

1. decodes it (:func:`~fxdurable.queues.sqs.decode_wake`). A body that is not a wake is logged
   and left alone: SQS moves it to the queue's dead-letter queue after its
   ``maxReceiveCount``. A queue without a redrive policy has nowhere to put it, so there it is
   deleted once logged (it can never become a wake; kept, it would come back forever);
2. runs the session through the ``WakeHandler`` with a budget of ``FXD_SQS_JOB_TIMEOUT_S``
   (900 s; a fifth of it, at most 30 s, is kept for the hand-off), while a background task
   extends the message's visibility (``ChangeMessageVisibility`` to ``FXD_SQS_VISIBILITY_S``
   every third of it): the twin of the session lease's heartbeat. A failed extension is
   logged and retried at the next beat; it never stops the work, because the store's lease,
   not the message, decides who runs the session;
3. deletes the message once the handler returns: the session is at rest, a continuation
   wake was enqueued (the budget ran out, or the worker is stopping), or the session belongs
   to another live worker (whose release re-checks for work in the same transaction) or to
   nobody this worker knows. If the handler fails (a store outage mid-turn, a bug in a hook),
   the message is left for redelivery after a backoff (2, 4, 8 ... s, at most the visibility
   timeout), and after ``maxReceiveCount`` SQS moves it to the dead-letter queue.

**Crashes.** A SIGKILLed worker deletes nothing: its messages come back after their visibility
timeout, and the next worker takes the session's lease over at once on the same host (the
holder's pid is gone) or once the lease expires (``FXD_LEASE_TTL_S``) elsewhere, recording an
unsafe tool call that was in flight as ``outcome_unknown``. Each interruption costs the
submission one attempt: a wake that kills every worker that takes it (a poison message) makes
its submission settle ``failed`` (``attempts_exhausted``) once the agent's ``max_attempts``
are spent, and the session rests, even if SQS had moved the message to the dead-letter queue
first: the reconciliation scan below wakes the session again.

**Store outages.** A store away for longer than a session's lease stops that session's run
before the lease expires; if a tool's code is still executing at the run's stop deadline (a
sync tool's thread), the worker exits with status 75 (docs/leases.md): a thread cannot be
stopped otherwise, and its effect must not land after another worker takes the session over.
Run the worker under a supervisor that restarts it.

**Reconciliation.** At start and every ``--scan-interval`` seconds (5; 0 turns it off) the
worker wakes every session with unsettled work and no live owner (:mod:`fxdurable.runtime.
reconcile`), as the RQ worker does. SQS redelivery covers a killed worker whose message still
exists, but not a wake that was never sent (the submitter died after admitting), one that went
to the dead-letter queue while its session still had work, or one deleted by a worker whose
run was then cut short by a lost lease. With the scan off, run ``fxdurable scan`` or a
scheduled scan handler instead.

**Stopping.** The first SIGTERM or SIGINT stops every running turn at its next step boundary:
it commits, enqueues a continuation, releases the lease; the worker deletes the message and
exits 0. An idle worker exits when its current long poll returns (at most ``FXD_SQS_WAIT_S``);
messages that poll brings are made visible again at once. A second SIGTERM or SIGINT exits at
once (status 128 + the signal), leaving leases and messages to be recovered as after a crash.

With ``--burst`` it exits once a poll finds the queue empty and nothing is running.

Environment: ``FXD_STORE``, ``FXD_QUEUE``, ``FXD_AGENTS`` (or ``--store``/``--queue``/
``--agents``), the lease settings of :class:`~fxdurable.runtime.worker.WorkerSettings`
(``FXD_LEASE_TTL_S``, ``FXD_HEARTBEAT_S``, ``FXD_SCAN_QUIET_S``), and
:class:`~fxdurable.workers.sqs_settings.SqsWorkerSettings`: ``FXD_SQS_WAIT_S`` (20),
``FXD_SQS_VISIBILITY_S`` (30), ``FXD_SQS_JOB_TIMEOUT_S`` (900). AWS credentials and region
come from boto3's usual chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from fxdurable.core.queue import WakeQueue
from fxdurable.errors import ConfigurationError, ConflictError, FxDurableError, QueueError
from fxdurable.queues.sqs import SqsQueue, decode_wake
from fxdurable.runtime import tracing
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.runtime.reconcile import orphaned_sessions
from fxdurable.runtime.wake_conflicts import CONFLICT_HAND_ONS, handed_on_reason, handle_wake
from fxdurable.workers.config import WorkerConfig, job_budget
from fxdurable.workers.sqs_consumer import SqsConsumer
from fxdurable.workers.sqs_settings import SqsWorkerSettings
from fxdurable.workers.warm import WarmContext

__all__ = ["Consumer", "SqsWorker", "run_sqs_worker"]

log = logging.getLogger("fxdurable.sqs")

READY = "listening on SQS queue"
# After a failed receive (SQS unreachable or throttling), wait this long, doubling to the max.
RECEIVE_RETRY_S = (1.0, 30.0)


class Message(Protocol):
    @property
    def message_id(self) -> str: ...
    @property
    def body(self) -> str: ...
    @property
    def receive_count(self) -> int: ...


class Consumer(Protocol):
    """The primitives a queue backend fills for this loop (SQS: :class:`SqsConsumer`;
    PostgreSQL: :class:`fxdurable.queues.postgres.PgConsumer`)."""

    @property
    def where(self) -> str: ...
    def receive(self, max_messages: int, *, visibility_s: int) -> Sequence[Any]: ...
    def extend(self, message: Any, visibility_s: int) -> bool: ...
    def delete(self, message: Any) -> bool: ...


class SqsWorker:
    """The receive loop of one worker process, on its warm context's event loop. Any
    :class:`Consumer` fills its primitives; ``backend`` names it in log lines."""

    def __init__(
        self,
        context: WarmContext,
        queue: WakeQueue,
        consumer: Consumer,
        settings: SqsWorkerSettings,
        *,
        max_receives: int | None,
        burst: bool = False,
        scan_interval_s: float = 5.0,
        backend: str = "SQS",
        interrupt: Callable[[], None] | None = None,
    ) -> None:
        self._backend = backend
        # Ends a blocked receive at the first stop signal (Postgres's LISTEN); SQS's long
        # poll has no such call and returns within FXD_SQS_WAIT_S.
        self._interrupt = interrupt
        self._context = context
        self._queue = queue
        self._consumer = consumer
        self._settings = settings
        self._max_receives = max_receives  # the redrive policy's; None: no dead-letter queue
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
            log.info(
                "%s %s (concurrency %d, wait %ds, visibility %ds, job timeout %gs, %s)",
                READY if self._backend == "SQS" else f"listening on {self._backend} queue",
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
        log.info("worker stopped%s", f" ({self._stop_signal})" if self._stop_signal else "")
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
            except QueueError as exc:  # SQS away or throttling: ride it out, as RQ's worker does
                log.warning("receiving from SQS failed (%s); retrying in %gs", exc, pause)
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
            # message was not deleted: SQS delivers it again.
            log.error("handling a message failed", exc_info=task.exception())

    # -- one message -------------------------------------------------------------------------

    async def _handle(self, message: Message) -> None:
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
        log.info(
            "wake %s (%s) done in %.2fs, delivery %d%s",
            session_id,
            reason,
            time.monotonic() - started,
            message.receive_count,
            "" if deleted else "; its receipt had lapsed (SQS delivers it again)",
        )

    async def _keep_invisible(self, message: Message) -> None:
        """Extend the message's visibility every third of the timeout while its wake runs."""
        visibility = self._settings.visibility_s
        while True:
            await asyncio.sleep(visibility / 3)
            try:
                kept = await asyncio.to_thread(self._consumer.extend, message, visibility)
            except FxDurableError as exc:
                log.warning("could not extend message %s (%s)", message.message_id, exc)
                continue
            if not kept:
                # Another delivery of it exists now; that copy finds the lease held and is
                # dropped, or runs after our release. Nothing to extend any more.
                log.warning("message %s was delivered again while its wake ran", message.message_id)
                return

    async def _delete(self, message: Message) -> bool:
        try:
            return await asyncio.to_thread(self._consumer.delete, message)
        except FxDurableError as exc:
            # It comes back after its visibility timeout; the store makes that wake harmless.
            log.warning("could not delete message %s (%s)", message.message_id, exc)
            return False

    async def _pass_on(self, session_id: str, reason: str, exc: ConflictError) -> bool:
        """Hand a still-conflicting wake on as a fresh one; False once it was handed on
        CONFLICT_HAND_ONS times, or the send failed (the message is retried, towards the
        dead-letter queue)."""
        handed_on = handed_on_reason(reason)
        if handed_on is None:
            log.error(
                "wake %s still conflicts (%s) after %d fresh wakes; left to SQS redelivery",
                session_id,
                exc,
                CONFLICT_HAND_ONS,
            )
            return False
        log.warning("wake %s still conflicts (%s); passed on as a fresh wake", session_id, exc)
        try:
            await self._queue.enqueue(session_id, reason=handed_on)
        except FxDurableError as send_exc:
            log.warning("could not pass the wake for %s on: %s", session_id, send_exc)
            return False
        return True

    async def _retry_later(self, message: Message, session_id: str, exc: Exception) -> None:
        delay = min(2 ** min(message.receive_count, 16), self._settings.visibility_s)
        log.error(
            "wake %s failed on delivery %d (%s: %s); SQS delivers it again in %ds%s",
            session_id,
            message.receive_count,
            type(exc).__name__,
            exc,
            delay,
            self._dead_letter_note(message),
            exc_info=not isinstance(exc, FxDurableError),
        )
        with contextlib.suppress(FxDurableError):
            await asyncio.to_thread(self._consumer.extend, message, delay)

    async def _not_a_wake(self, message: Message, exc: QueueError) -> None:
        if self._max_receives is None:
            log.error(
                "message %s is not a wake (%s); deleted (the queue has no dead-letter queue)",
                message.message_id,
                exc,
            )
            await self._delete(message)
            return
        log.error(
            "message %s is not a wake (%s); left for the dead-letter queue%s",
            message.message_id,
            exc,
            self._dead_letter_note(message),
        )

    def _dead_letter_note(self, message: Message) -> str:
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
        except Exception as exc:  # keep scanning: a store or SQS hiccup must not end recovery
            log.warning("%s failed (%s: %s); retrying later", what, type(exc).__name__, exc)
            return
        if found:
            log.info("%s woke %d session(s)", what, len(found))

    # -- stopping ----------------------------------------------------------------------------

    def _on_stop_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._stop_signal is not None:
            # A second stop: exit now, as after a crash (leases expire, messages reappear).
            os.write(2, f"fxdurable worker: second {name}, exiting at once\n".encode())
            os._exit(128 + signum)
        self._stop_signal = name
        log.warning(
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


def _quiet_aws_logging() -> None:
    """botocore logs every request at DEBUG, signed headers included: keep it out of a ``-v``
    worker's log (no credentials in logs)."""
    for name in ("botocore", "boto3", "urllib3", "s3transfer"):
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.getEffectiveLevel(), logging.INFO))


def run_sqs_worker(
    config: WorkerConfig,
    *,
    burst: bool = False,
    scan_interval_s: float = 5.0,
    concurrency: int = 1,
) -> int:
    """Run until stopped (or, with ``burst``, until the queue is empty). Returns an exit code.
    Fails fast, before any message, on a bad setting, a missing queue or store, or refused
    access."""
    _quiet_aws_logging()
    settings = SqsWorkerSettings.from_env(concurrency=concurrency)
    if scan_interval_s < 0:
        raise ConfigurationError("--scan-interval must be 0 (off) or a number of seconds")
    context = WarmContext(config)
    consumer: SqsConsumer | None = None
    try:
        queue = context.queue
        if not isinstance(queue, SqsQueue):
            raise ConfigurationError(f"an SQS worker needs an sqs:// queue: {config.queue_url}")
        consumer = SqsConsumer(queue, wait_s=settings.wait_s)
        # The first line of the log at the default level, once the configuration has passed.
        announce_model_endpoints(context.agents.values(), process="fxdurable worker (SQS)")
        max_receives = consumer.redrive_max_receives()
        if max_receives is None:
            log.warning(
                "the SQS queue %s has no redrive policy: a message that is not a wake is "
                "deleted once logged, and a wake that keeps failing is retried until the "
                "session's attempts are spent",
                consumer.where,
            )
        worker = SqsWorker(
            context,
            queue,
            consumer,
            settings,
            max_receives=max_receives,
            burst=burst,
            scan_interval_s=scan_interval_s,
        )
        return context.run(worker.serve())
    finally:
        if consumer is not None:
            consumer.close()
        context.close()
