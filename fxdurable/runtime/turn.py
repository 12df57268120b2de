"""The turn driver: runs one submission step by step, a durable record at every step.

For each step it reads what the records prove, asks :func:`next_action` what comes next, does
it, and records it before going on (DESIGN §3.4-3.6). At every step boundary it honours an
abort intent, the submission's budgets and the invocation's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pydantic

from fxdurable.core.clock import Clock
from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Exhausted, Fence, Journal, Outcome
from fxdurable.core.records import (
    ErrorInfo,
    ModelCallRecord,
    SubmissionRecord,
    ToolTaskRecord,
    TurnRecord,
)
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.store import ReadView
from fxdurable.errors import SteeringPendingError, Suspend, ToolInputError
from fxdurable.runtime import tracing
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.conversation import ConversationCache
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.decide import (
    CallModel,
    Complete,
    RecoverTool,
    RunTool,
    is_blind_repeat,
    next_action,
    refusal_message,
    unknown_message,
)
from fxdurable.runtime.model_step import Failed, ModelStep, Sleep
from fxdurable.runtime.tools import Tool, ToolContext

__all__ = ["TurnDriver"]

log = logging.getLogger("fxdurable.turn")


@dataclass(frozen=True, slots=True)
class _Snapshot:
    submission: SubmissionRecord
    turn: TurnRecord
    last_call: ModelCallRecord | None
    round_tasks: Sequence[ToolTaskRecord]
    steering_pending: bool


class TurnDriver:
    """Drives one submission within one attempt. Raises :class:`Suspend` at a deadline."""

    def __init__(
        self,
        journal: Journal,
        agent: Agent,
        fence: Fence,
        budget: InvocationBudget,
        *,
        worker: str,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        conversations: ConversationCache | None = None,
    ) -> None:
        self._journal = journal
        self._conversations = conversations or ConversationCache()
        self._agent = agent
        self._fence = fence
        self._budget = budget
        self._worker = worker
        self._clock = clock
        self._model_step = ModelStep(
            journal,
            agent,
            fence,
            budget,
            sleep=sleep,
            rng=rng or random.Random(),
            conversations=self._conversations,
        )
        self._attempt = 0
        self._running_tool: asyncio.Task[str] | None = None
        self._abort_seen = False

    # -- called by the heartbeat -------------------------------------------------------------

    def abort_requested(self) -> None:
        """Cancel the tool in flight (if any); the loop settles ``aborted`` at the boundary."""
        self._abort_seen = True
        if self._running_tool is not None:
            self._running_tool.cancel()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, submission_id: str) -> None:
        j = self._journal
        queued = await durable(j.read, lambda view: view.get_submission(submission_id))
        if queued is not None and queued.status == "queued" and queued.abort_requested:
            # Aborted before it ever ran: it settles without a turn, so its prompt never
            # enters the conversation later turns are shown.
            await durable(j.settle, self._fence, submission_id, "aborted")
            return
        start = await durable(j.begin_attempt, self._fence, submission_id, worker=self._worker)
        self._attempt = start.attempt.number
        if start.recovered:
            # A recovery may re-run settled reads (reuse=False) and closes out partial text:
            # what this process held of the conversation is read again from the records.
            self._conversations.drop(start.turn.session_id)
        first_boundary = True
        while True:
            snap = await durable(j.read, lambda view: self._snapshot(view, submission_id))
            action = next_action(
                snap.turn, snap.last_call, snap.round_tasks, steering_pending=snap.steering_pending
            )
            if isinstance(action, Complete):
                # The records prove the final answer: finished work is never discarded, by an
                # abort that came after it or by a spent budget (DESIGN §4).
                try:
                    await durable(
                        j.settle, self._fence, submission_id, "completed", text=action.text
                    )
                except SteeringPendingError:
                    continue  # steering landed after our read: the model answers it
                return
            # An abort intent wins over every budget (DESIGN §3.8).
            if snap.submission.abort_requested or self._abort_seen:
                await self._resolve_running(snap.round_tasks)
                await durable(j.settle, self._fence, submission_id, "aborted")
                return
            if first_boundary:
                first_boundary = False
                sub = snap.submission
                if sub.interruptions >= self._agent.durability.max_attempts:
                    await self._fail(
                        sub.id,
                        "attempts_exhausted",
                        f"interrupted {sub.interruptions} times; the budget is "
                        f"{self._agent.durability.max_attempts} attempts",
                        snap.round_tasks,
                        exhausted="attempts_exhausted",
                    )
                    return
                if start.recovered and await self._refresh_stale_reads(snap):
                    continue  # refreshed results were recorded: read the records again
            started = snap.submission.started_at or 0.0
            if self._now() - started > self._agent.durability.timeout_s:
                await self._fail(
                    submission_id,
                    "timeout",
                    f"the turn ran past its {self._agent.durability.timeout_s:g}s budget",
                    snap.round_tasks,
                    exhausted="time_exhausted",
                )
                return
            reason = self._budget.stop_reason()
            if reason is not None:
                raise Suspend(reason)
            self._budget.record_progress()
            match action:
                case CallModel(round=round_):
                    if not await self._call_model(snap.turn, round_):
                        return
                case RunTool(task=task):
                    await self._run_tool(task)
                case RecoverTool(task=task):
                    await self._recover_tool(task)

    def _now(self) -> float:
        return self._clock.now()

    @staticmethod
    def _snapshot(view: ReadView, submission_id: str) -> _Snapshot:
        sub = view.get_submission(submission_id)
        turn = view.get_turn(submission_id)
        assert sub is not None and turn is not None, "begin_attempt created both"
        last = view.get_model_call(turn.id, turn.rounds - 1) if turn.rounds else None
        tasks = view.tool_tasks(turn.id, last.round) if last is not None else ()
        session = view.get_session(sub.session_id)
        steering = session is not None and bool(session.steering)
        return _Snapshot(sub, turn, last, tasks, steering)

    # -- model ---------------------------------------------------------------------------------

    async def _call_model(self, turn: TurnRecord, round_: int) -> bool:
        """One model step; False when it settled the submission ``failed``."""
        outcome = await self._model_step.run(turn, round_)
        if isinstance(outcome, Failed):
            await self._fail(turn.submission_id, outcome.code, outcome.message)
            return False
        return True

    # -- tools ---------------------------------------------------------------------------------

    @tracing.tool_call
    async def _run_tool(self, task: ToolTaskRecord) -> None:
        j = self._journal
        tool = self._agent.tool(task.tool)
        if tool is None:
            known = ", ".join(t.name for t in self._agent.tools) or "none"
            await self._finish(
                task, ToolTaskStatus.FAILED, f"unknown tool {task.tool!r}; available tools: {known}"
            )
            return
        try:
            arguments = tool.parse(task.arguments)
        except ToolInputError as exc:
            await self._finish(task, ToolTaskStatus.FAILED, str(exc))
            return
        # The turn's own calls only: the model was told of the unknown outcome in this turn,
        # and reading the session's whole history here would make a step cost grow with it.
        earlier = await durable(j.read, lambda view: view.tool_tasks(task.turn_id))
        if is_blind_repeat(task, earlier, tool.canonical_input):
            await self._finish(task, ToolTaskStatus.REFUSED, refusal_message(task.tool))
            return
        if self._agent.before_tool is not None:
            crash_point("hook.before-tool", task.tool)
            denial = await self._agent.before_tool(task.tool, task.arguments)
            if denial is not None:
                await self._finish(task, ToolTaskStatus.FAILED, f"denied: {denial}")
                return
        started = await durable(j.start_tool, self._fence, task.id)
        crash_point("tool.after-intent", task.tool)
        await self._execute(started, tool, arguments)

    @tracing.tool_recovery
    async def _recover_tool(self, task: ToolTaskRecord) -> None:
        """A task found ``running``: a crash cut it short. Its recorded policy decides."""
        tool = self._agent.tool(task.tool)
        if task.policy == "unsafe" or tool is None:
            await self._finish(task, ToolTaskStatus.OUTCOME_UNKNOWN, unknown_message(task.tool))
            return
        try:
            arguments = tool.parse(task.arguments)
        except ToolInputError as exc:  # the tool's input model changed under a running task
            await self._finish(task, ToolTaskStatus.FAILED, str(exc))
            return
        started = await durable(self._journal.start_tool, self._fence, task.id, reason="recovery")
        await self._execute(started, tool, arguments)

    async def _refresh_stale_reads(self, snap: _Snapshot) -> bool:
        """``reuse=False``: re-run completed safe reads of the round a crash interrupted.
        Returns True if any was re-run."""
        if all(
            t.status != ToolTaskStatus.RUNNING and t.status != ToolTaskStatus.PENDING
            for t in snap.round_tasks
        ):
            return False  # the round finished: the model already read those results
        refreshed = False
        for task in snap.round_tasks:
            tool = self._agent.tool(task.tool)
            if task.status == ToolTaskStatus.COMPLETED and tool is not None and not tool.reuse:
                started = await durable(
                    self._journal.start_tool, self._fence, task.id, reason="refresh"
                )
                await self._execute(started, tool, tool.parse(task.arguments))
                refreshed = True
        return refreshed

    @tracing.tool_rerun
    async def _execute(
        self, task: ToolTaskRecord, tool: Tool, arguments: pydantic.BaseModel
    ) -> None:
        ctx = ToolContext(
            execution_id=task.execution_id,
            session_id=task.session_id,
            tool_name=tool.name,
            attempt=task.runs,
        )
        self._running_tool = asyncio.ensure_future(tool.run(arguments, ctx))
        status: ToolTaskStatus
        try:
            result = await asyncio.wait_for(self._running_tool, timeout=tool.timeout_s)
            status = ToolTaskStatus.COMPLETED
        except TimeoutError:
            status, result = self._interrupted(tool, f"timed out after {tool.timeout_s:g}s")
        except asyncio.CancelledError:
            if not self._abort_seen:
                raise  # the worker itself is being torn down: leave the task running
            ctx.cancelled.set()
            status, result = self._interrupted(tool, "cancelled by an abort")
        except Exception as exc:
            status, result = ToolTaskStatus.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            self._running_tool = None
        crash_point("tool.after-execute", tool.name)
        await self._finish(task, status, result)
        crash_point("tool.after-record", tool.name)

    @staticmethod
    def _interrupted(tool: Tool, why: str) -> tuple[ToolTaskStatus, str]:
        """A call stopped mid-flight: safe ones are simply cancelled, others are unknown."""
        if tool.policy == "safe":
            return ToolTaskStatus.CANCELLED, f"{tool.name} {why}"
        return ToolTaskStatus.OUTCOME_UNKNOWN, f"{tool.name} {why}. " + unknown_message(tool.name)

    @tracing.tool_outcome
    async def _finish(self, task: ToolTaskRecord, status: ToolTaskStatus, result: str) -> None:
        await durable(self._journal.finish_tool, self._fence, task.id, status, result)

    # -- endings -------------------------------------------------------------------------------

    async def _resolve_running(self, tasks: Sequence[ToolTaskRecord]) -> None:
        """Before settling: a task still ``running`` was cut short by a crash."""
        for task in tasks:
            if task.status != ToolTaskStatus.RUNNING:
                continue
            if task.policy == "safe":
                await self._finish(task, ToolTaskStatus.CANCELLED, "cancelled")
            else:
                await self._finish(task, ToolTaskStatus.OUTCOME_UNKNOWN, unknown_message(task.tool))

    async def _fail(
        self,
        submission_id: str,
        code: str,
        message: str,
        round_tasks: Sequence[ToolTaskRecord] = (),
        *,
        exhausted: Exhausted | None = None,
    ) -> None:
        j = self._journal
        if not round_tasks:
            snap = await durable(j.read, lambda v: self._snapshot(v, submission_id))
            round_tasks = snap.round_tasks
        await self._resolve_running(round_tasks)
        tasks = await durable(j.read, lambda v: v.tool_tasks(submission_id))
        unknown = tuple(
            f"{t.tool} ({t.id})" for t in tasks if t.status == ToolTaskStatus.OUTCOME_UNKNOWN
        )
        if unknown:
            message += "; outcome unknown for: " + ", ".join(unknown)
        outcome: Outcome = "failed"
        await durable(
            j.settle,
            self._fence,
            submission_id,
            outcome,
            error=ErrorInfo(code=code, message=message, unknown_calls=unknown),
            exhausted=exhausted,
        )
        log.warning("submission %s failed: %s", submission_id, message)
