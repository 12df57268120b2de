"""A subagent call's child session: admit its one submission, run it to its answer.

The turn driver hands every tool call a :class:`ChildSessions` (``ctx.children``); only a
subagent's tool (:mod:`fxdurable.runtime.subagent`) uses it. :meth:`ChildSessions.run`:

1. admits the child's submission (``Journal.admit_child``: one transaction, fenced by the
   parent's lease, idempotent on the request id the call's execution id names);
2. **drives the child's turn itself**, inline, through the worker's own wake handling (the
   child's lease, heartbeat, recovery and continuation like any worker's), within the
   parent's budget: its invocation deadline and shutdown, and what is left of its turn's
   time budget. Recovery therefore never waits for a worker that can only start after it
   (DESIGN §9): whoever recovers the parent runs the child;
3. if another live worker holds the child's lease (a scan or a continuation woke the child
   elsewhere, e.g. on another RQ worker), waits for the child to settle instead, polling its
   submission every :data:`WAIT_POLL_S`, taking the child over as soon as that worker is gone
   (each poll tries the lease again: one read when it is still held);
4. while the child waits for a person's answer (``fx.ask`` in its hook), only reads its
   submission every poll: nothing runs it, so it is not claimed (no writes) until answered;
5. returns the child's final text, or raises :class:`~fxdurable.errors.SubagentError`
   naming the child when it failed or was aborted.

At the parent's deadline the child stops at its own step boundary (its continuation is
enqueued as for any session) and the call raises :class:`~fxdurable.errors.Suspend`: the
parent suspends with the call running, and its next attempt re-executes the call (its policy
is ``idempotent``), which finds the same child and goes on from the child's last step.

Several subagent calls of one response run at once (a parallel batch,
:mod:`fxdurable.runtime.batch`), each in its own task: nothing here is shared between them
but the worker's wake handling, which keeps everything of one wake (the child's lease, its
heartbeat, its turn driver) local to that wake, so two children are two independent wakes in
one process. The admission is not one of the parent turn's serialised crossings: it writes
the child's records and the call's ``child_session``, never the parent's session version or
events, and the driver's turn state does not read it (the call's result commit returns the
call as it now is).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection
from contextvars import ContextVar
from dataclasses import dataclass

from fxdurable.core.asking import waits_for_input
from fxdurable.core.clock import Clock
from fxdurable.core.journal import Fence, Journal
from fxdurable.core.records import SubmissionRecord
from fxdurable.core.states import SubmissionStatus
from fxdurable.core.subagent import child_failure
from fxdurable.errors import RecordNotFoundError, SubagentError, Suspend
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.crossing import durable

__all__ = [
    "ChildDriver",
    "ChildSessions",
    "DriveSession",
    "ParentBudget",
    "abort_child",
    "running_child",
]

# Runs one wake of a session in this process: False when another live worker holds it.
DriveSession = Callable[[str, InvocationBudget], Awaitable[bool]]

# How often a call waiting on a child run elsewhere looks at the child's submission.
WAIT_POLL_S = 0.05

# The child session a subagent call is running inline, for the code of that run (every task
# it starts copies the context): the ``subagent.in-child`` crash point fires only there.
_RUNNING_CHILD: ContextVar[str | None] = ContextVar("fxd_running_child", default=None)


def running_child() -> str | None:
    """The child session this code runs for, inline in its parent's call; None elsewhere."""
    return _RUNNING_CHILD.get()


class ParentBudget(InvocationBudget):
    """The child's invocation budget: the parent's (its deadline, a shutdown request), ended
    earlier by the parent turn's own time budget (``timeout_s`` from the turn's start).

    Like every invocation, the child's takes at least one step before a deadline may stop
    it: the parent's call starts with its own deadline already near (the parent's steps
    count for the parent), and without that step a parent resumed near its deadline would
    re-execute the call forever without the child ever moving. A shutdown stops it at once.
    """

    def __init__(self, parent: InvocationBudget, *, ends_at: float, clock: Clock) -> None:
        super().__init__(None)
        self._parent = parent
        self._ends_at_wall = ends_at
        self._clock = clock
        self._stepped = False

    def request_stop(self, reason: str = "shutdown") -> None:
        self._parent.request_stop(reason)

    def requested_stop(self) -> str | None:
        return self._parent.requested_stop()

    def record_progress(self) -> None:
        self._stepped = True
        self._parent.record_progress()

    def remaining(self) -> float | None:
        left = self._ends_at_wall - self._clock.now()
        parent = self._parent.remaining()
        return left if parent is None else min(parent, left)

    def stop_reason(self) -> str | None:
        if not self._stepped:
            return self._parent.requested_stop()
        return self.parent_stop_reason()

    def parent_stop_reason(self) -> str | None:
        """Why the parent must stop now (its call waits for the child no longer)."""
        reason = self._parent.stop_reason()
        if reason is None and self._clock.now() >= self._ends_at_wall:
            return "parent time budget"
        return reason


@dataclass(frozen=True, slots=True)
class ChildDriver:
    """How a worker runs child sessions: its wake handling, and the agents it has."""

    drive: DriveSession
    agents: Collection[str]

    def for_call(
        self,
        journal: Journal,
        fence: Fence,
        task_id: str,
        budget: InvocationBudget,
        *,
        turn_ends_at: float,
        clock: Clock,
    ) -> ChildSessions:
        """The child sessions of one run of one call (``turn_ends_at``: when the parent
        turn's time budget runs out, on the journal's clock)."""
        return ChildSessions(
            journal=journal,
            fence=fence,
            task_id=task_id,
            agents=self.agents,
            drive=self.drive,
            budget=ParentBudget(budget, ends_at=turn_ends_at, clock=clock),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildSessions:
    """What one run of one tool call may do with child sessions (runtime-only)."""

    journal: Journal
    fence: Fence  # the parent's lease
    task_id: str  # the parent's running call
    agents: Collection[str]  # the agents this worker can run
    drive: DriveSession
    budget: ParentBudget
    poll_s: float = WAIT_POLL_S

    async def run(self, agent: str, prompt: str) -> str:
        """The child's final answer (see the module docstring)."""
        if agent not in self.agents:
            raise SubagentError(
                f"agent {agent!r} is not registered with this worker (it has: "
                f"{', '.join(sorted(self.agents)) or 'none'}); a subagent's agent must be"
                " known to every worker that may run its parent"
            )
        admission = await durable(
            self.journal.admit_child, self.fence, self.task_id, agent=agent, prompt=prompt
        )
        submission = admission.submission
        child = submission.session_id
        waiting = False
        while True:
            if not waiting:  # a child waiting for a person's answer has nothing to run
                token = _RUNNING_CHILD.set(child)
                try:
                    await self.drive(child, self.budget)
                except Exception as exc:  # a store fault, a bug in the child's model client
                    raise SubagentError(
                        child_failure(child, "could not be run", f"{type(exc).__name__}: {exc}"),
                        child_session=child,
                    ) from exc
                finally:
                    _RUNNING_CHILD.reset(token)
            record = await self._read(submission.id)
            if record.settled_at is not None:
                return _answer(record)
            stop = self.budget.parent_stop_reason()
            if stop is not None:
                raise Suspend(stop)
            # Not settled: another live worker runs it (wait; take it over once it is gone),
            # its run ended early (a lost lease, a model backoff), or it waits for a person
            # (only its submission is read until the answer comes): look again shortly.
            waiting = waits_for_input(record)
            await asyncio.sleep(self.poll_s)

    async def _read(self, submission_id: str) -> SubmissionRecord:
        record: SubmissionRecord | None = await durable(
            self.journal.read, lambda v: v.get_submission(submission_id)
        )
        assert record is not None, submission_id  # admitted above; submissions stay
        return record


async def abort_child(journal: Journal, child_session: str) -> None:
    """Record an abort intent on a child whose answer is no longer wanted (its parent was
    aborted or failed for good). Durable; the child settles ``aborted`` when next run (a
    scan finds it once no live worker holds it). A child never admitted is left alone."""
    with contextlib.suppress(RecordNotFoundError):
        await durable(journal.request_abort, child_session)


def _answer(submission: SubmissionRecord) -> str:
    child = submission.session_id
    if submission.status == SubmissionStatus.COMPLETED:
        return submission.result_text or ""
    reason = submission.error.message if submission.error is not None else submission.status.value
    outcome = "was aborted" if submission.status == SubmissionStatus.ABORTED else "failed"
    raise SubagentError(child_failure(child, outcome, reason), child_session=child)
