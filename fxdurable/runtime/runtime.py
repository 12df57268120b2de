"""The embedded runtime: store + queue + workers in one process.

``Runtime`` admits submissions, runs wakes from its queue on a few worker tasks, reconciles at
start (every session with unsettled work and no live owner gets a wake) and repeats that scan
periodically, which also catches a wake lost between a check and a release (DESIGN §9).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import random
import signal
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal

from fxdurable.backends import DEFAULT_QUEUE, DEFAULT_STORE, open_queue, open_store
from fxdurable.core.clock import Clock, IdSource, RandomIds, SystemClock
from fxdurable.core.fork import ForkPoint
from fxdurable.core.journal import Fork, Journal, Steering
from fxdurable.core.queue import InProcessQueue, WakeQueue
from fxdurable.core.records import EventRecord, SessionRecord, SubmissionRecord
from fxdurable.core.states import SubmissionStatus
from fxdurable.core.store import Store
from fxdurable.errors import (
    ConfigurationError,
    FxDurableError,
    StoreError,
    SubmissionFailedError,
    UnknownAgentError,
    WakeNotSentError,
)
from fxdurable.runtime import tracing
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.answers import Question, pending_question, record_answer
from fxdurable.runtime.attachments import store_attachments
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.erase import EraseReport, erase_session
from fxdurable.runtime.history import conversation
from fxdurable.runtime.hooks import Answer
from fxdurable.runtime.leases import OnLostLease
from fxdurable.runtime.model_step import Sleep
from fxdurable.runtime.models import aclose_loaded_clients
from fxdurable.runtime.models.base import Attachment, ChatMessage
from fxdurable.runtime.output import OutputSpec
from fxdurable.runtime.reconcile import orphaned_sessions
from fxdurable.runtime.schedule import Cron, Schedule, Scheduled, run_schedule
from fxdurable.runtime.submission import Submission
from fxdurable.runtime.task_view import ToolTask, running_task
from fxdurable.runtime.turn_ends import TurnEnds
from fxdurable.runtime.worker import WakeHandler, WorkerSettings

__all__ = ["Runtime", "SessionHandle"]

log = logging.getLogger("fxdurable.runtime")


class Runtime:
    """Run agents durably in this process. Use as ``async with Runtime(...) as rt:``.

    ``store`` is a URL or a store object; by default ``$FXD_STORE``, else
    ``sqlite:///.fxd/fxd.db``.
    ``queue`` is ``"local"`` (the default, or ``$FXD_QUEUE``): this process runs the wakes on
    ``concurrency`` worker tasks. With a remote queue (``rq://...``) this process only admits
    and reads; workers elsewhere (``fxdurable worker``) run the turns.
    ``invocation_budget_s`` bounds each wake (continuations carry the rest).
    ``on_lost_lease`` says what happens when a run that could not renew its lease (a store
    away for longer than it) still executes a tool's code at its stop deadline: ``"exit"``
    (the default) ends this process at once with status 75, the only stop a sync tool's
    thread cannot ignore; a callable (given a :class:`~fxdurable.runtime.leases.LostLease`,
    in a thread of its own) is an embedder's own stop, which must end those executions
    before the lease expires (docs/leases.md).
    """

    def __init__(
        self,
        agents: Sequence[Agent],
        *,
        store: str | Store | None = None,
        queue: str | None = None,
        settings: WorkerSettings | None = None,
        invocation_budget_s: float | None = None,
        concurrency: int = 4,
        shutdown_grace_s: float = 10.0,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        on_lost_lease: OnLostLease = "exit",
    ) -> None:
        if not agents:
            raise ConfigurationError("a runtime needs at least one agent")
        self.agents = {a.name: a for a in agents}
        if len(self.agents) != len(agents):
            raise ConfigurationError("agent names must be unique")
        settings_in_effect = (settings or WorkerSettings()).validate()  # before opening
        if store is None:
            store = os.environ.get("FXD_STORE") or DEFAULT_STORE
        self._store = open_store(store) if isinstance(store, str) else store
        self._owns_store = isinstance(store, str)
        self._clock = clock or SystemClock()
        self.journal = Journal(self._store, self._clock, ids or RandomIds())
        self.queue: WakeQueue = open_queue(queue or os.environ.get("FXD_QUEUE") or DEFAULT_QUEUE)
        self._local = self.queue if isinstance(self.queue, InProcessQueue) else None
        self.settings = settings_in_effect
        self._budget_s = invocation_budget_s
        self._concurrency = concurrency
        self._grace_s = shutdown_grace_s
        # ``sleep`` and ``rng`` drive model-retry backoff: tests inject them to run without
        # real waiting and with fixed jitter.
        self._turn_ends = TurnEnds()  # session.wait reads again when a wake here ends
        self._handler = WakeHandler(
            self.journal,
            self.queue,
            self.agents,
            self._clock,
            self.settings,
            sleep=sleep,
            rng=rng,
            on_lost_lease=on_lost_lease,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._sleep = sleep  # also a schedule's (runtime/schedule.py)
        self._budgets: set[InvocationBudget] = set()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._stop_requested_at: float | None = None  # time.monotonic() of the first request

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        if self._local is None:
            return  # remote workers run the wakes, and their scans reconcile
        await self.reconcile()
        self._tasks = [
            asyncio.create_task(self._consume(), name=f"fxd-worker-{n}")
            for n in range(self._concurrency)
        ]
        self._tasks.append(asyncio.create_task(self._scan_forever(), name="fxd-scan"))

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop every session at its next step boundary (graceful shutdown)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)

    @property
    def stopped(self) -> bool:
        """A stop was requested and every session in flight has reached a boundary."""
        return self._stopping and not self._in_flight

    @property
    def stop_requested(self) -> bool:
        """A stop was requested (a signal, :meth:`request_stop`, :meth:`aclose`); sessions
        in flight may still be finishing their step, for up to :attr:`shutdown_grace_s`."""
        return self._stopping

    @property
    def shutdown_grace_s(self) -> float:
        """How long after a stop request sessions in flight may take to reach a step
        boundary; then :meth:`aclose` cancels them (recovery takes over from their leases)."""
        return self._grace_s

    @property
    def shutdown_grace_left_s(self) -> float | None:
        """What is left of the shutdown grace (0 once spent), counted from the first stop
        request; None while no stop was requested."""
        if self._stop_requested_at is None:
            return None
        return max(0.0, self._grace_s - (time.monotonic() - self._stop_requested_at))

    def request_stop(self, reason: str = "shutdown") -> None:
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()
        self._stopping = True
        for budget in list(self._budgets):
            budget.request_stop(reason)

    async def aclose(self) -> None:
        """Stop at step boundaries (within the grace period), then close the store."""
        self.request_stop()
        if self._in_flight:
            # The grace counts from the first stop request: a SIGTERM a follower waited on
            # (fxdurable.cli.follow) has used it already, and is not granted it twice.
            left = self.shutdown_grace_left_s
            _done, pending = await asyncio.wait(self._in_flight, timeout=left)
            for task in pending:  # could not reach a boundary: its lease expires instead
                task.cancel()
        for task in self._tasks:
            task.cancel()
        for task in [*self._tasks, *self._in_flight]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await aclose_loaded_clients()  # they belong to this event loop
        await self.queue.aclose()
        if self._owns_store:
            self._store.close()

    # -- workers -----------------------------------------------------------------------------

    async def _consume(self) -> None:
        assert self._local is not None, "only a local queue is consumed in process"
        while True:
            session_id, reason, trace_parent = await self._local.get()
            tracing.set_wake_parent(trace_parent)  # copied into the handling task's context
            if self._stopping:
                continue
            log.debug("wake %s (%s)", session_id, reason)
            task = asyncio.create_task(self._handle(session_id))
            self._in_flight.add(task)
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                raise
            except StoreError as exc:  # the store's trouble, said in full by its message
                log.warning("wake for session %s failed: %s", session_id, exc)
            except Exception:
                log.exception("wake for session %s failed", session_id)
            finally:
                self._in_flight.discard(task)

    async def wake(self, session_id: str, *, budget_s: float | None = None) -> None:
        """Run one wake of the session in this process, whatever the queue.

        For push-style delivery (the HTTP ``/wake`` route, a Lambda): the session runs until
        it rests or ``budget_s`` (default: the runtime's invocation budget) says stop, and
        then a continuation wake is enqueued. A session another live worker holds is left to
        it. Never raises for a session it cannot run: the reason is logged.
        """
        if self._stopping:
            await self.queue.enqueue(session_id, reason="wake-during-shutdown")
            return
        task = asyncio.create_task(self._handle(session_id, budget_s))
        # Tracked so a shutdown stops it at a step boundary; shielded so a caller that goes
        # away (an HTTP client hanging up) does not cut a step in half.
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        await asyncio.shield(task)

    async def _handle(self, session_id: str, budget_s: float | None = None) -> None:
        budget = InvocationBudget(budget_s if budget_s is not None else self._budget_s)
        self._budgets.add(budget)
        try:
            await self._handler.handle(session_id, budget)
        finally:
            self._budgets.discard(budget)
            # After the whole wake (the lease released): a caller whose session.run returns
            # does not race the wake's last reads and release with its next submission.
            self._turn_ends.pulse()

    async def reconcile(self) -> int:
        """Enqueue a wake for every session with unsettled work and no live owner."""
        now = self._clock.now()
        sessions = await durable(self.journal.read, lambda v: orphaned_sessions(v, now=now))
        for session_id in sessions:
            await self.queue.enqueue(session_id, reason="reconcile")
        return len(sessions)

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.scan_interval_s)
            try:
                await self.reconcile()
            except StoreError as exc:  # one line per interval while the store is away
                log.warning(
                    "reconciliation scan failed; retrying in %gs: %s",
                    self.settings.scan_interval_s,
                    exc,
                )
            except Exception:
                log.exception("reconciliation scan failed; retrying next interval")

    # -- sessions ----------------------------------------------------------------------------

    def schedule(
        self,
        session_id: str,
        prompt: str,
        *,
        at: float | None = None,
        every: str | None = None,
        agent: str | None = None,
    ) -> Scheduled:
        """Submit ``prompt`` to the session once ``at`` (epoch seconds) or on the cron
        expression ``every``, while this runtime runs (docs/timers.md). Each fire's request
        id is derived from the schedule and the fire time: a retried fire is one submission."""
        plan = Schedule(
            session_id, prompt, at=at, every=None if every is None else Cron.parse(every)
        )
        handle = self.session(session_id, agent=agent)  # checks the agent now

        async def submit(_: str, text: str, request_id: str) -> None:
            await handle.submit(text, request_id=request_id)

        fired: list[float] = []

        async def fire() -> None:
            await run_schedule(plan, submit, clock=self._clock, sleep=self._sleep, fired=fired)

        task = asyncio.create_task(fire(), name=f"fxd-schedule-{plan.id}")
        self._tasks.append(task)
        return Scheduled(plan, fired, task)

    def session(self, session_id: str, *, agent: str | None = None) -> SessionHandle:
        if agent is None:
            if len(self.agents) != 1:
                raise ConfigurationError("several agents: name the one for this session")
            agent = next(iter(self.agents))
        if agent not in self.agents and agent not in self._handler.agents:
            raise UnknownAgentError(session_id, agent, list(self.agents))
        return SessionHandle(self, session_id, agent)

    async def fork(self, session_id: str, new_id: str, *, after: ForkPoint = None) -> Fork:
        """Start session ``new_id`` from ``session_id``'s conversation as it was ``after`` a
        point, at rest and with no work: its next message continues from there.

        ``after`` is a submission id of the source (the conversation once it settled), an
        event cursor of the source (after *any* recorded step: a model reply, a tool result,
        a compaction; each event's ``seq``), or None (everything recorded so far). Since
        every step is recorded, a fork can start after any of them, not only between turns.
        One transaction: the fork exists whole or not at all. Forking again into the same id
        from the same point returns the same fork; any other session there raises
        :class:`~fxdurable.errors.SessionExistsError`; a point the source does not have
        raises :class:`~fxdurable.errors.ForkPointError`. Use ``rt.session(fork.session_id)``
        to talk to it.
        """
        return await durable(self.journal.fork, session_id, new_id, after=after)


class SessionHandle:
    """One session: submit prompts, wait for outcomes, read events and history, abort."""

    def __init__(self, runtime: Runtime, session_id: str, agent: str) -> None:
        self._rt = runtime
        self.id = session_id
        self.agent = agent

    def _output(self) -> OutputSpec | None:
        """How this session's agent types its answers (None: plain text)."""
        agent = self._rt._handler.agents.get(self.agent)  # those given and their subagents
        return agent.output if agent is not None else None

    async def submit(
        self,
        prompt: str,
        *,
        request_id: str | None = None,
        when_busy: Literal["queue", "reject"] = "queue",
        attachments: Sequence[Attachment] = (),
    ) -> Submission:
        """Admit ``prompt`` durably and wake a worker. Idempotent on ``request_id``. A wake
        the queue did not take raises :class:`~fxdurable.errors.WakeNotSentError` (the prompt
        is admitted all the same; the reconciliation scan runs it). ``attachments``: images
        and documents sent with the prompt (docs/attachments.md); each one's bytes are put
        as a blob first, a bad one raises :class:`~fxdurable.errors.AttachmentError` with
        nothing written."""
        refs = (
            await durable(store_attachments, self._rt.journal.store.put_blob, attachments)
            if attachments
            else ()
        )
        with tracing.turn(self.agent) as span:
            admission = await durable(
                self._rt.journal.admit,
                self.id,
                agent=self.agent,
                prompt=prompt,
                request_id=request_id,
                when_busy=when_busy,
                trace_parent=span.trace_parent,
                attachments=refs,
                retention_days=_retention(self._rt.agents.get(self.agent)),
            )
            span.admitted(admission.submission, created=admission.created)
            try:
                await self._rt.queue.enqueue(self.id, reason="submitted")
            except Exception as exc:
                # The admission is committed: say so, rather than let a queue's traceback
                # read as a lost prompt. Our own errors carry no credentials; others are
                # named by type only (a client library's text may quote a URL).
                cause = str(exc) if isinstance(exc, FxDurableError) else type(exc).__name__
                raise WakeNotSentError(admission.submission.id, cause) from exc
        return Submission.of(admission.submission, self._output())

    async def wait(
        self, submission_id: str, *, timeout: float | None = None, poll_s: float = 0.02
    ) -> Submission:
        """Wait until the submission settles and return it (any outcome). A wake this
        runtime runs is read again as soon as it ends; a submission another process settles
        is seen on the next poll, every ``poll_s``."""
        turn_ends = self._rt._turn_ends

        async def settled() -> Submission:
            while True:
                seen = turn_ends.count
                sub = await self.submission(submission_id)
                if sub is None:
                    raise SubmissionFailedError(
                        submission_id, "unknown", {"message": "no such submission"}
                    )
                if sub.settled:
                    return sub
                await turn_ends.after(seen, poll_s)

        return await asyncio.wait_for(settled(), timeout)

    async def run(
        self,
        prompt: str,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> str:
        """Submit and wait; return the final answer or raise :class:`SubmissionFailedError`."""
        submitted = await self.submit(prompt, request_id=request_id, attachments=attachments)
        sub = await self.wait(submitted.id, timeout=timeout)
        if sub.status != SubmissionStatus.COMPLETED:
            error = (
                None
                if sub.error is None
                else {
                    "code": sub.error.code,
                    "message": sub.error.message,
                    "unknown_calls": list(sub.error.unknown_calls),
                }
            )
            raise SubmissionFailedError(sub.id, sub.status.value, error)
        return sub.result or ""

    async def events(self, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        """Events after the cursor ``after``; each event's ``seq`` is the next cursor."""
        return list(await durable(self._rt.journal.read, lambda v: v.events(self.id, after, limit)))

    async def history(self) -> list[ChatMessage]:
        return await durable(self._rt.journal.read, lambda v: conversation(v, self.id))

    async def submission(self, submission_id: str) -> Submission | None:
        record: SubmissionRecord | None = await durable(
            self._rt.journal.read, lambda v: v.get_submission(submission_id)
        )
        return None if record is None else Submission.of(record, self._output())

    async def task(self, task_id: str) -> ToolTask | None:
        """One tool call of this session (ids are in its ``tool.*`` events): while it runs,
        ``progress`` is what it reported so far; once settled, ``result`` replaces it."""
        record = await durable(self._rt.journal.read, lambda v: v.get_tool_task(task_id))
        return None if record is None or record.session_id != self.id else ToolTask.of(record)

    async def running_task(self) -> ToolTask | None:
        """The tool call in flight now, with its progress; None between calls."""
        record = await durable(self._rt.journal.read, lambda v: running_task(v, self.id))
        return None if record is None else ToolTask.of(record)

    async def record(self) -> SessionRecord | None:
        """The session's record as stored (status, lease, cursors); None before it exists."""
        return await durable(self._rt.journal.read, lambda v: v.get_session(self.id))

    async def state(self) -> dict[str, Any]:
        """The session's persisted state (what tools wrote with ``ctx.state``), as committed:
        a call's writes appear with its result, never before. A copy; empty for a session
        that does not exist yet."""
        record = await self.record()
        return {} if record is None else copy.deepcopy(dict(record.state))

    async def steer(self, text: str) -> Steering:
        """Steer the running turn: the model reads ``text`` at its next step boundary.

        With nothing in flight the text is admitted as a new submission instead
        (``Steering.steered`` is False); either way it is durable before this returns.
        Raises :class:`~fxdurable.SteeringFullError` while 16 steering messages already wait
        for the turn's next model call.
        """
        steering = await durable(self._rt.journal.steer, self.id, text)
        await self._rt.queue.enqueue(self.id, reason="steer")
        return steering

    async def abort(self) -> list[str]:
        """Record a durable abort intent on every unsettled submission; returns their ids."""
        marked = await durable(self._rt.journal.request_abort, self.id)
        await self._rt.queue.enqueue(self.id, reason="abort")
        return marked

    async def erase(self, *, force: bool = False) -> EraseReport:
        """Delete this session: its journal, events, state, the workspace blobs and S3
        objects no other session names, its subagents' sessions, and its forks' references to
        it (a fork keeps its own copy). Refused with :class:`~fxdurable.SessionBusyError`
        while a turn is queued or running, unless ``force``, which records its abort and
        fences its worker first. A kill mid-erase leaves it resumable: erase again
        (docs/erasure.md)."""
        return await durable(erase_session, self._rt.journal, self.id, force=force)

    async def question(self) -> Question | None:
        """The question this session's turn waits on (``needs_input``), or one a subagent's
        child asks while this session's call waits for it (``Question.session_id`` names the
        child; :meth:`answer` here answers it), or None."""
        return await durable(self._rt.journal.read, lambda v: pending_question(v, self.id))

    async def answer(self, answer: Answer) -> Submission:
        """Answer the question the turn waits on, durably, and wake it: ``fx.allow()``,
        ``fx.deny(reason)`` or ``fx.rewrite(input)`` (a call's new input, validated against
        its tool). Returns the submission, running again. Raises
        :class:`~fxdurable.NoPendingQuestionError` when nothing waits (a repeated answer
        too: the first one is applied) and :class:`~fxdurable.InvalidAnswerError` for a
        rewrite that does not validate; nothing is written then."""
        record = await durable(record_answer, self._rt.journal, self._rt.agents, self.id, answer)
        # This session's, or a subagent's child's whose question was surfaced here.
        await self._rt.queue.enqueue(record.session_id, reason="answer")
        return Submission.of(record, self._output())

    async def resume(self) -> None:
        """For operators: wake the session. Nothing should need it (scans do the same)."""
        await self._rt.queue.enqueue(self.id, reason="resume")


def _retention(agent: Agent | None) -> float | None:
    """What an admission records as the session's retention (core/retention.py)."""
    return None if agent is None else agent.retention_days
