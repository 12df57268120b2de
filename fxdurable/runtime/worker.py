"""Handling one wake: claim the session, run it to rest or to the deadline, let go.

The store, not the queue, decides what is done: a wake for a session at rest does nothing, and
a wake for a session another live worker holds is dropped (that worker's release re-checks for
work in the same transaction, so nothing is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fxdurable.core.asking import expired_question, question_due_at, waits_for_input
from fxdurable.core.clock import Clock
from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Claimed, Fence, Journal, WorkerIdentity
from fxdurable.core.queue import WakeQueue
from fxdurable.errors import ConfigurationError, LeaseLostError, Suspend, UnknownAgentError
from fxdurable.runtime import tracing
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.children import ChildDriver
from fxdurable.runtime.conversation import ConversationCache
from fxdurable.runtime.crossing import durable, durable_apart
from fxdurable.runtime.interrupts import watch_interrupts
from fxdurable.runtime.leases import GuardedRun, LeaseView, OnLostLease, enter_run, guard, unguard
from fxdurable.runtime.model_step import Sleep
from fxdurable.runtime.subagent import with_delegates
from fxdurable.runtime.turn import TurnDriver
from fxdurable.runtime.webhooks import deliver_due, next_due

__all__ = ["WakeHandler", "WorkerSettings", "local_process_is_dead", "this_worker"]

log = logging.getLogger("fxdurable.worker")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    """Lease timing (docs/leases.md). A SIGKILLed worker on another host is recovered within
    ``lease_ttl_s`` plus one scan; on the same host at once (its pid is gone).

    The heartbeat renews the lease every ``heartbeat_s``; a failed renewal is retried with
    backoff until ``lease_margin_s`` before the lease expires. Then the run is cancelled, and
    by its *stop deadline*, half the margin before expiry, nothing of it may still execute: a
    sync tool's thread still running then ends the process (``on_lost_lease``), so a store
    outage never leaves an effect in flight once another worker can take the session over.
    ``lease_margin_s`` defaults to half a heartbeat (2.5 s with the defaults), and must leave
    room for a heartbeat:
    ``heartbeat_s + lease_margin_s < lease_ttl_s``."""

    lease_ttl_s: float = 15.0
    heartbeat_s: float = 5.0
    scan_interval_s: float = 5.0
    # With a durable queue, a session nobody holds is woken again only after this long
    # without activity (its wake may be waiting behind a backlog; see runtime/reconcile.py).
    scan_quiet_s: float = 30.0
    lease_margin_s: float | None = None

    @property
    def margin_s(self) -> float:
        """The margin in effect: ``lease_margin_s``, or its default (see the class)."""
        if self.lease_margin_s is not None:
            return self.lease_margin_s
        margin = self.heartbeat_s / 2  # where the heartbeat always gave up
        if self.heartbeat_s + margin >= self.lease_ttl_s:  # a heartbeat close to the TTL
            margin = (self.lease_ttl_s - self.heartbeat_s) / 2
        return margin

    def validate(self) -> WorkerSettings:
        """Raise :class:`~fxdurable.errors.ConfigurationError` for timings that cannot keep
        the lease's promise; return the settings."""
        ttl, beat, margin = self.lease_ttl_s, self.heartbeat_s, self.lease_margin_s
        if not (ttl > 0 and beat > 0):
            raise ConfigurationError("the lease TTL and the heartbeat must be positive")
        if beat >= ttl:
            raise ConfigurationError("the heartbeat must be shorter than the lease TTL")
        if margin is not None and not (margin > 0 and beat + margin < ttl):
            raise ConfigurationError(
                f"lease_margin_s={margin:g} must be positive and leave room for a heartbeat "
                f"(heartbeat_s + lease_margin_s < lease_ttl_s: {beat:g} + {margin:g} is not "
                f"below {ttl:g}); lower it or raise FXD_LEASE_TTL_S"
            )
        return self

    @classmethod
    def from_env(cls) -> WorkerSettings:
        """``FXD_LEASE_TTL_S``, ``FXD_HEARTBEAT_S``, ``FXD_LEASE_MARGIN_S``,
        ``FXD_SCAN_INTERVAL_S`` and ``FXD_SCAN_QUIET_S`` override the defaults."""
        defaults = cls()
        values = {}
        for name, env in (
            ("lease_ttl_s", "FXD_LEASE_TTL_S"),
            ("heartbeat_s", "FXD_HEARTBEAT_S"),
            ("lease_margin_s", "FXD_LEASE_MARGIN_S"),
            ("scan_interval_s", "FXD_SCAN_INTERVAL_S"),
            ("scan_quiet_s", "FXD_SCAN_QUIET_S"),
        ):
            raw = os.environ.get(env)
            if raw is None:
                values[name] = getattr(defaults, name)
                continue
            try:
                values[name] = float(raw)
            except ValueError as exc:
                raise ConfigurationError(f"{env} must be a number of seconds, not {raw!r}") from exc
        return cls(**values).validate()


def this_worker() -> WorkerIdentity:
    return WorkerIdentity(host=socket.gethostname(), pid=os.getpid())


def local_process_is_dead(host: str, pid: int) -> bool:
    """True only when ``pid`` on this host certainly no longer runs."""
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, owned by someone else
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed process not yet reaped by its parent still answers ``kill(pid, 0)``; on Linux
    its state in /proc says it is dead (Z or X). Elsewhere, assume it runs."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return bool(fields) and fields[0] in (b"Z", b"X")


class WakeHandler:
    def __init__(
        self,
        journal: Journal,
        queue: WakeQueue,
        agents: Mapping[str, Agent],
        clock: Clock,
        settings: WorkerSettings,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        identity: WorkerIdentity | None = None,
        on_lost_lease: OnLostLease = "exit",
    ) -> None:
        # ``on_lost_lease``: what happens when a run that cannot renew its lease still
        # executes tool code at its stop deadline (runtime/leases.py; "exit" ends the process).
        # ``identity`` names this worker in the leases it takes. The default (this host and
        # pid) lets a restarted process on the same host take over from its dead self at once;
        # a worker whose host name and pid may repeat elsewhere (a Lambda sandbox) passes one
        # no other process can have, so its leases are only ever taken over on expiry.
        self._journal = journal
        self._queue = queue
        # A subagent's agent (fx.subagent) runs wherever its parent does.
        self._agents = {a.name: a for a in with_delegates(agents.values())}
        self._clock = clock
        self._settings = settings.validate()
        self._on_lost_lease = on_lost_lease
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._identity = identity or this_worker()
        # The conversations of sessions this process ran: later steps and wakes read only
        # what is newer (runtime/conversation.py).
        self._conversations = ConversationCache()

    @property
    def _worker_name(self) -> str:
        """This worker as its attempts record it."""
        return f"{self._identity.host}:{self._identity.pid}"

    @property
    def agents(self) -> Mapping[str, Agent]:
        """The agents this handler runs: those it was given and their subagents' agents."""
        return self._agents

    async def handle(self, session_id: str, budget: InvocationBudget) -> bool:
        """Run the session until it rests or the budget says stop. Never raises for a
        session it cannot run: it logs why and leaves the session intact. Returns False
        when another live worker holds the session (a subagent call then waits for it)."""
        j = self._journal
        session = await durable(j.read, lambda v: v.get_session(session_id))
        if session is None:
            log.warning("wake for unknown session %s ignored", session_id)
            return True
        agent = self._agents.get(session.agent)
        if agent is None:
            log.error("%s", UnknownAgentError(session_id, session.agent, list(self._agents)))
            return True
        if session.status != "active":
            return True  # at rest: a duplicate or late wake
        # The lease runs from no earlier than now: the heartbeat's deadline for renewing it.
        ttl = self._settings.lease_ttl_s
        held_since = time.monotonic()
        held_until = self._clock.now() + ttl
        owes = agent.webhook is not None or bool(session.webhooks)
        # The claim reads what the wake decides from first, and begins the attempt in its own
        # commit where nothing else comes first (a webhook owed goes out before the turn).
        claimed = await durable(
            j.claim_wake,
            session_id,
            self._identity,
            ttl_s=self._settings.lease_ttl_s,
            holder_is_dead=local_process_is_dead,
            begin_as=None if owes else self._worker_name,
            agent_version=agent.version,
        )
        if claimed is None:
            return False  # another live worker owns it; its release re-checks for work
        fence = claimed.fence
        if claimed.interrupted:
            crash_point("recovery.after-claim")
        driver_box: list[TurnDriver] = []
        view = LeaseView(margin_s=self._settings.margin_s)
        view._renewed(expires_at=held_until, expires_mono=held_since + ttl)
        run = GuardedRun(session_id, view, self._on_lost_lease)
        guard(run)
        work = asyncio.ensure_future(
            self._run(fence, agent, budget, driver_box, run, owes, claimed)
        )
        work.add_done_callback(lambda _: run.ended())
        beat = asyncio.ensure_future(self._heartbeat(fence, work, driver_box, run))
        # An abort or a steer acts now, not at the next beat (runtime/interrupts.py).
        watch = asyncio.ensure_future(watch_interrupts(j, session_id, driver_box))
        try:
            await work
        except Suspend as stop:
            if not await self._drain(fence, run, beat):
                return True  # not renewed meanwhile: the lease is not ours to release
            await _stop(beat)
            await self._continue_later(fence, stop, run)
            return True
        except LeaseLostError as exc:
            log.warning("%s", exc)
            run.lost_now()  # another worker holds it: nothing of ours may run on
            return True
        except asyncio.CancelledError:
            if await _stop(beat):
                return True  # fenced out: the heartbeat found the lease lost or expiring
            # Torn down mid-step (a hard shutdown): keep the lease; it expires and the work
            # is recovered like a crash.
            raise
        except Exception as exc:
            # A bug in a hook or a model client, a store fault mid-turn: not a crash, so let
            # go now rather than make the next wake wait out the TTL. The error goes on to
            # the caller, which logs it (and a queue may redeliver the wake).
            if await self._drain(fence, run, beat) and not await _stop(beat):
                await self._release_after(fence, exc, run)
            raise
        else:
            if not await self._drain(fence, run, beat):
                return True  # not renewed meanwhile: the lease is not ours to release
        finally:
            watch.cancel()
            await _stop(beat)
        more = await durable(j.release, fence)
        unguard(run)
        if more:
            await self._queue.enqueue(session_id, reason="more work")
        elif (due := work.result()) is not None and self._queue.delays_wakes:
            # The question it waits on expires: the timer's wake, held back by the queue
            # (past a queue's longest delay, SQS's 900 s, the early wake lands here again and
            # re-arms the rest). Enqueued after the release, so it finds no lease; a queue
            # that cannot delay leaves the timer to the scan, which wakes it once due.
            delay_s = max(0.0, due - self._clock.now())
            await self._queue.enqueue(session_id, reason="timer", delay_s=delay_s)
        return True

    async def _drain(self, fence: Fence, run: GuardedRun, beat: asyncio.Future[bool]) -> bool:
        """Before the lease is let go: wait, still renewing it, until none of the run's tool
        code executes. A sync call past its ``timeout_s``, or aborted, is recorded and the
        turn goes on, but its thread runs on; releasing the lease now would let another
        worker (or this one, on a later wake) take the session over while an effect of this
        run may still land (docs/leases.md). So the session stays held, for as long as it
        takes. False when the heartbeat ended meanwhile (the lease could not be renewed, or
        was taken over): it is not ours to release, and the guard ends what still runs by
        the stop deadline (runtime/leases.py)."""
        idle = asyncio.ensure_future(run.wait_idle())
        watched: set[asyncio.Future[Any]] = {idle, beat}
        try:
            waited = 0.0
            while True:
                step_s = self._settings.lease_ttl_s
                done, _ = await asyncio.wait(
                    watched, timeout=step_s, return_when=asyncio.FIRST_COMPLETED
                )
                if idle in done:
                    return not (beat.done() and not beat.cancelled() and beat.result())
                if beat in done:
                    return False
                waited += step_s
                log.warning(
                    "session %s: the lease is kept (renewed) until %s ends: its call timed "
                    "out or was aborted %s ago, but its thread still runs",
                    fence.session_id,
                    ", ".join(run.executing()) or "a tool call",
                    f"more than {waited:g}s",
                )
        finally:
            idle.cancel()

    async def _release_after(self, fence: Fence, error: Exception, run: GuardedRun) -> None:
        try:
            await durable(self._journal.release, fence)
            unguard(run)
        except Exception as release_error:  # the store that failed the turn may still be away
            log.warning(
                "session %s: could not release the lease after %s (%s); it expires in %gs",
                fence.session_id,
                type(error).__name__,
                release_error,
                self._settings.lease_ttl_s,
            )
        else:
            log.warning(
                "session %s: lease released after %s; the next wake recovers the turn",
                fence.session_id,
                type(error).__name__,
            )

    async def _run(
        self,
        fence: Fence,
        agent: Agent,
        budget: InvocationBudget,
        box: list[TurnDriver],
        run: GuardedRun,
        owes_webhooks: bool,
        claimed: Claimed,
    ) -> float | None:
        """Run the session's submissions in order, and send the settlement webhooks due
        (``owes_webhooks``: the agent has one, or the session owed one when the wake began);
        returns when the question the next one waits on expires or a webhook is retried
        (None: at rest, or a question without a timeout). The first pass decides from what
        the claim read (``claimed``) and runs the attempt it began, if it began one."""
        enter_run(run)  # this task's tool calls execute as the run's (runtime/leases.py)
        j = self._journal
        sid = fence.session_id
        # What the claim read stands for the first pass, unless webhooks may be owed (their
        # pass reads the session with the submissions, as every later pass does).
        known: Claimed | None = None if owes_webhooks else claimed
        while True:
            start = None
            if known is not None:
                unsettled, session, start, known = list(known.unsettled), None, known.start, None
            else:
                # One read: the session only when it may owe webhooks (no extra read otherwise).
                unsettled, session = await durable(
                    j.read,
                    lambda v: (
                        v.unsettled_submissions(sid),
                        v.get_session(sid) if owes_webhooks else None,
                    ),
                )
            # Settlement webhooks due go out first, before the next turn, which may be long;
            # then the loop reads again what their records left.
            if session is not None and await deliver_due(
                j, fence, agent.webhook, session, self._clock
            ):
                continue
            retry_due = None if session is None else next_due(session)
            if unsettled and expired_question(unsettled[0], self._clock.now()):
                # The question's timer is due: its timeout answer, raced with a person's
                # (exactly one is recorded), then the turn goes on with whichever won.
                await durable(j.expire_input, sid)
                continue
            if unsettled and waits_for_input(unsettled[0]):
                # Waiting for a person: the answer wakes it, or the question's timer (or a
                # webhook's retry, whichever is sooner).
                return _sooner(question_due_at(unsettled[0]), retry_due)
            if not unsettled:
                return retry_due  # at rest, unless a webhook's retry is still to come
            driver = TurnDriver(
                j,
                agent,
                fence,
                budget,
                worker=self._worker_name,
                clock=self._clock,
                sleep=self._sleep,
                rng=self._rng,
                conversations=self._conversations,
                queue_delays_wakes=self._queue.delays_wakes,
                # A subagent call runs its child here, through this same wake handling.
                children=ChildDriver(self.handle, frozenset(self._agents)),
            )
            box[:] = [driver]
            async with tracing.attempt(j, unsettled[0], agent.name):
                await driver.run(unsettled[0].id, start=start)

    async def _heartbeat(
        self,
        fence: Fence,
        work: asyncio.Future[float | None],
        box: list[TurnDriver],
        run: GuardedRun,
    ) -> bool:
        """Extend the lease until cancelled, noticing aborts on the way. Returns True when
        the lease was lost or is about to expire unrenewed, after cancelling the work: it
        may not write any more (fencing would refuse it), and an effect still in flight must
        not overlap the next owner's run (DESIGN §9: a heartbeat that dies quietly is a split
        brain). The run's tool code still executing by its stop deadline is the guard's
        (runtime/leases.py)."""
        while True:
            await asyncio.sleep(self._settings.heartbeat_s)
            try:
                renewed = await self._renew(fence, run.view)
            except LeaseLostError:
                log.warning("lease on %s lost; stopping this worker's run", fence.session_id)
                run.lost_now()
                work.cancel()
                return True
            if not renewed:
                log.error(
                    "lease on %s could not be renewed before it expires; stopping this "
                    "worker's run (another worker recovers the session once the store answers)",
                    fence.session_id,
                )
                run.view._lost()
                work.cancel()
                return True
            await self._notice_abort(fence, box)

    async def _renew(self, fence: Fence, view: LeaseView) -> bool:
        """Extend the lease, retrying failures with backoff while it still holds, and update
        ``view``. False when no renewal succeeded in time.

        Gives up ``lease_margin_s`` before the lease expires, so that the work is cancelled,
        and has ended, before another worker may claim the session. A renewal still hanging
        then (a store that does not answer) is abandoned in its thread; should it land
        later, it only extends a lease nobody uses, which then expires. A late beat (a clock
        that jumped, a loop that stalled) still tries once: the fence, not our estimate,
        says whether the lease is still ours."""
        ttl = self._settings.lease_ttl_s
        assert view.expires_at is not None
        give_up_at = view.expires_at - self._settings.margin_s
        pause = self._settings.heartbeat_s / 4
        failures = 0
        while True:
            started = self._clock.now()
            started_mono = time.monotonic()
            try:
                # asyncio.timeout, not wait_for: in 3.11 wait_for swallows a cancellation that
                # lands as the call completes, and the heartbeat would then never stop.
                # A late beat's one try ends well before the run's stop deadline.
                async with asyncio.timeout(max(give_up_at - started, self._settings.margin_s / 4)):
                    await durable_apart(self._journal.heartbeat, fence, ttl_s=ttl)
            except LeaseLostError:
                raise
            except Exception as exc:  # any failure is retried: renewal must not stop quietly
                failures += 1
                left = give_up_at - self._clock.now()
                log.warning(
                    "lease renewal for session %s failed (%s); %s",
                    fence.session_id,
                    _describe(exc),
                    f"retrying for {left:.1f}s more" if left > 0 else "giving up",
                )
                if left <= 0:
                    return False
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, self._settings.heartbeat_s)
                continue
            if failures:
                log.warning(
                    "lease on %s renewed after %d failed attempts", fence.session_id, failures
                )
            view._renewed(expires_at=started + ttl, expires_mono=started_mono + ttl)
            return True

    async def _notice_abort(self, fence: Fence, box: list[TurnDriver]) -> None:
        """Tell the running turn of an abort recorded by another process."""
        try:
            # Apart, like the renewal: the beat awaits it, and must not queue behind tools.
            unsettled = await durable_apart(
                self._journal.read, lambda v: v.unsettled_submissions(fence.session_id)
            )
        except Exception as exc:  # noticed at the next beat, or at the turn's next boundary
            log.debug("abort check for %s failed: %s", fence.session_id, exc)
            return
        if box and unsettled and unsettled[0].abort_requested:
            box[0].abort_requested()

    async def _continue_later(self, fence: Fence, stop: Suspend, run: GuardedRun) -> None:
        """Deadline, shutdown or a long model backoff at a step boundary: commit, enqueue a
        continuation (delayed by the backoff, where the queue can delay), let go."""
        j = self._journal
        reason = f"continuation ({stop.reason})"
        delay_s = stop.resume_after_s if self._queue.delays_wakes else 0.0
        running = await durable(j.read, lambda v: v.unsettled_submissions(fence.session_id))
        if running and stop.attempt_started:
            await durable(j.suspend, fence, running[0].id, reason=stop.reason)
        crash_point("continuation.before-enqueue")
        await self._queue.enqueue(fence.session_id, reason=reason, delay_s=delay_s)
        crash_point("continuation.after-enqueue")
        released_more = await durable(j.release, fence)
        unguard(run)
        if released_more and stop.attempt_started:
            # Another worker may have taken the continuation wake while we still held the
            # lease and dropped it: wake again now that the lease is free (DESIGN §9). Not
            # after an early wake in a model backoff: each of those would double the delayed
            # wakes in flight (one stop per wake), and a lost one is found by the scan.
            await self._queue.enqueue(fence.session_id, reason=reason, delay_s=delay_s)


async def _stop(beat: asyncio.Future[bool]) -> bool:
    """Stop the heartbeat; True if it had ended on a lost or expiring lease."""
    if not beat.done():
        beat.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return await beat
    return False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _sooner(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
