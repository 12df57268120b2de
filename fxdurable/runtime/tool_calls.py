"""The turn driver's tool-call path: hook, intent, execution, result, for a call run alone,
a call recovered after a crash, and a parallel batch (:mod:`fxdurable.runtime.batch`).

See :mod:`fxdurable.runtime.turn` for how a step's commits are shared.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Held, StartNext, ToolResult, ToolStep
from fxdurable.core.records import (
    AttachmentRef,
    ToolTaskRecord,
)
from fxdurable.core.session_state import StateWrites
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.subagent import child_failure, child_session_id
from fxdurable.errors import (
    StateTooLargeError,
    Suspend,
    ToolInputError,
    ToolOutcomeUnknownError,
)
from fxdurable.runtime import relay, tracing
from fxdurable.runtime.batch import HookGate, ResultGroup, run_batch
from fxdurable.runtime.children import ChildSessions, abort_child, running_child
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.decide import (
    CallModel,
    GoOn,
    at_boundary,
    refusal_message,
    unknown_message,
)
from fxdurable.runtime.hooks import Ask, run_after_tool, run_before_tool
from fxdurable.runtime.leases import current_lease
from fxdurable.runtime.model_step import Prepared
from fxdurable.runtime.progress import ProgressPump
from fxdurable.runtime.state import ToolState
from fxdurable.runtime.steps import StepLog
from fxdurable.runtime.subagent import SubagentTool
from fxdurable.runtime.tool_records import BlobWriter, ToolRecords
from fxdurable.runtime.tool_retry import run_retrying
from fxdurable.runtime.tools import Tool, ToolContext
from fxdurable.runtime.turn_base import TurnBase
from fxdurable.runtime.turn_state import ReadyTool

__all__ = ["ToolCalls"]

# What a result's crossing hands the loop: the next model request if it read it, or the
# next call ready to run.
Outcome = tuple[Prepared | None, ReadyTool | None]


@dataclass(frozen=True, slots=True)
class _Settling:
    """A call's result on its way to its commit, and what follows the commit: the crash
    point's tool (``after_record``) and whether the next step is prepared (``merge``)."""

    task: ToolTaskRecord
    result: ToolResult
    after_record: str | None
    merge: bool


class ToolCalls(TurnBase):
    """Runs the turn's tool calls: each records its intent before it runs, its result after."""

    async def _run_batch(
        self, batch: Sequence[ToolTaskRecord]
    ) -> tuple[Prepared | None, ReadyTool | None]:
        """Run the calls of a batch concurrently, each as the loop would run it alone: a
        pending one normally, a running one (a crash cut the batch short) by its policy."""

        async def call(task: ToolTaskRecord) -> object:
            if self._waiting:  # an earlier call's hook asked a person: this one waits too
                return None
            if task.status == ToolTaskStatus.RUNNING:
                return await self._recover_tool(task)
            return await self._run_tool(task)

        gate = self._gate = HookGate([task.id for task in batch])
        for task in batch:
            if task.status == ToolTaskStatus.RUNNING:
                gate.passed(task.id)  # its hook ran before its first run: none to wait for
        self._batch_unstarted = {task.id for task in batch}
        self._prepared_after_batch = None
        self._arrived, self._batch_intents = {}, None
        self._results = ResultGroup(self._cross, self._commit_results)
        try:
            await run_batch([(task.id, functools.partial(call, task)) for task in batch], gate)
        finally:
            self._batch_unstarted = set()
            self._gate = None
            self._results = None
            self._arrived, self._batch_intents = {}, None
        # The loop decides the next step with its boundary checks; a model call next uses the
        # request the last result's crossing read, as after a call run alone.
        return self._prepared_after_batch, None

    @tracing.tool_call
    async def _run_tool(self, task: ToolTaskRecord) -> tuple[Prepared | None, ReadyTool | None]:
        ready = self._ready(task)
        if isinstance(ready, str):
            return await self._finish(task, ToolTaskStatus.FAILED, ready)
        tool, arguments = ready
        if self._blind_repeat(task, tool):
            return await self._finish(task, ToolTaskStatus.REFUSED, refusal_message(task.tool))
        if task.answer is not None:
            # A person answered the hook's question: the hook is not asked again. A rewrite's
            # input already replaced the task's arguments (parsed above).
            if task.answer.kind == "deny":
                denial = task.answer.reason or "denied by a person"
                return await self._finish(task, ToolTaskStatus.FAILED, f"denied: {denial}")
        elif self._agent.before_tool is not None:
            crash_point("hook.before-tool", task.tool)
            state = self._state.session_state if self._state is not None else None
            verdict = await run_before_tool(self._agent.before_tool, task, state)
            if isinstance(verdict, Ask):
                await self._ask(
                    verdict.question,
                    about="tool",
                    task_id=task.id,
                    timeout_s=verdict.timeout_s,
                    on_timeout=verdict.on_timeout,
                )
                return None, None
            if verdict is not None:
                return await self._finish(task, ToolTaskStatus.FAILED, f"denied: {verdict}")
        if self._gate is not None:  # a batch's call: every hook of the batch decides first
            self._arrived[task.id] = tool.durable
            await self._gate.arrive(task.id)
            if self._waiting:
                return None, None  # another call's hook asked a person: no intent
            started = await self._batch_intent(task.id)
        else:
            started = await self._cross(self._start, task.id, None, tool.durable)
        crash_point("tool.after-intent", task.tool)
        return await self._execute(started, tool, arguments)

    async def _batch_intent(self, task_id: str) -> ToolTaskRecord:
        """A batch's call past the gate: the intents of every call that reached the gate
        commit together, once, in the order the model asked; each call takes its own."""
        if self._batch_intents is None:
            self._batch_intents = asyncio.ensure_future(self._start_arrived())
        started = await asyncio.shield(self._batch_intents)
        return started[task_id]

    async def _start_arrived(self) -> dict[str, ToolTaskRecord]:
        state = self._state
        assert state is not None
        starts = [StartNext(task_id, durable) for task_id, durable in self._arrived.items()]

        def commit() -> tuple[ToolStep, ...]:
            steps = self._journal.start_tools(self._fence, starts, held=state.held())
            for step in steps:
                state.noted(step)
            return steps

        steps = await self._cross(commit)
        for step in steps:  # one commit: each call's tool.after-intent is this state
            crash_point("tool.after-intent", step.task.tool)
        for step in steps:
            self._left_unstarted(step.task.id)
        return {step.task.id: step.task for step in steps}

    @tracing.tool_call
    async def _run_started(
        self, task: ToolTaskRecord, tool: Tool, arguments: pydantic.BaseModel
    ) -> tuple[Prepared | None, ReadyTool | None]:
        """Run a tool call whose intent the previous step's crossing recorded."""
        return await self._execute(task, tool, arguments)

    @tracing.tool_recovery
    async def _recover_tool(self, task: ToolTaskRecord) -> tuple[Prepared | None, ReadyTool | None]:
        """A task found ``running``: a crash cut it short. A durable call, still declared
        durable, re-executes with its recorded steps replayed; otherwise its recorded policy
        decides (a tool no longer declared, or no longer durable, falls back to it)."""
        tool = self._agent.tool(task.tool)
        if tool is None and task.child_session is not None:
            # A subagent no longer declared (a redeploy): this call alone fails, naming its
            # child; nothing was left unknown that the child's own records do not show.
            why = f"the subagent {task.tool!r} is no longer declared by this agent"
            await abort_child(self._journal, task.child_session)  # nobody will read its answer
            return await self._finish(
                task, ToolTaskStatus.FAILED, child_failure(task.child_session, "abandoned", why)
            )
        resumable = tool is not None and tool.durable and task.durable
        if tool is None or (task.policy == "unsafe" and not resumable):
            return await self._finish(
                task, ToolTaskStatus.OUTCOME_UNKNOWN, unknown_message(task.tool)
            )
        try:
            arguments = tool.parse(task.arguments)
        except ToolInputError as exc:  # the tool's input model changed under a running task
            return await self._finish(task, ToolTaskStatus.FAILED, str(exc))
        # A safe or idempotent call re-runs either way; if its tool is durable now, its steps
        # are recorded from this run on.
        started = await self._cross(self._start, task.id, "recovery", tool.durable)
        return await self._execute(started, tool, arguments)

    async def _refresh_stale_reads(self, round_tasks: Sequence[ToolTaskRecord]) -> bool:
        """``reuse=False``: re-run completed safe reads of the round a crash interrupted.
        Returns True if any was re-run."""
        if all(
            t.status != ToolTaskStatus.RUNNING and t.status != ToolTaskStatus.PENDING
            for t in round_tasks
        ):
            return False  # the round finished: the model already read those results
        refreshed = False
        for task in round_tasks:
            tool = self._agent.tool(task.tool)
            if task.status == ToolTaskStatus.COMPLETED and tool is not None and not tool.reuse:
                started = await durable(self._start, task.id, "refresh")
                await self._execute(started, tool, tool.parse(task.arguments), merge=False)
                refreshed = True
        return refreshed

    @tracing.tool_rerun
    async def _execute(
        self, task: ToolTaskRecord, tool: Tool, arguments: pydantic.BaseModel, *, merge: bool = True
    ) -> tuple[Prepared | None, ReadyTool | None]:
        progress = self._progress_pump(task)
        assert self._state is not None
        state = ToolState(self._state.session_state, tool=tool.name)
        ctx = ToolContext(
            execution_id=task.execution_id,
            session_id=task.session_id,
            tool_name=tool.name,
            attempt=task.runs,
            # In a subagent's child, reports also go up to the parent's call (runtime/relay.py).
            report=relay.relayed(progress.report),
            steps=self._step_log(task, tool, state) if tool.durable and task.durable else None,
            children=self._child_sessions(task) if isinstance(tool, SubagentTool) else None,
            state=state,
            records=ToolRecords(self._journal.store),
            blobs=BlobWriter(self._journal.store),
            turn_id=task.turn_id,
            round=task.round,
            lease=current_lease(),
            clock=self._clock,
            sleeper=self._sleep,
        )
        progress.start()
        running = asyncio.ensure_future(self._runs(task, tool, arguments, ctx, state))
        self._running_tools[running] = time.monotonic()
        if self._abort_seen:  # a batch's call whose intent was recorded after the abort
            running.cancel()
        status: ToolTaskStatus
        attached: tuple[AttachmentRef, ...] = ()  # a completed call's images
        try:
            result, attached = await asyncio.wait_for(running, timeout=tool.timeout_s)
            status = ToolTaskStatus.COMPLETED
        except TimeoutError:
            # A sync tool's thread runs on, holding the run's lease: it can see it should stop.
            ctx.cancelled.set()
            status, result = self._interrupted(tool, f"timed out after {tool.timeout_s:g}s")
        except asyncio.CancelledError:
            if not self._abort_seen:
                ctx.cancelled.set()  # a lost lease, a hard shutdown: a sync tool can see it
                progress.cancel()
                raise  # the worker itself is being torn down: leave the task running
            ctx.cancelled.set()
            if tool.threaded:
                # Fencing stops writes, not effects: the thread runs on (the lease is held
                # until it returns), so its effect may still land; never "it didn't happen".
                status, result = self._interrupted(
                    tool, "was aborted while its thread still ran", unknown=True
                )
            else:
                status, result = self._interrupted(tool, "cancelled by an abort")
            if isinstance(tool, SubagentTool):  # its child's work is no longer wanted
                await abort_child(
                    self._journal, child_session_id(task.session_id, task.execution_id)
                )
        except Suspend:
            # A subagent call reached the parent's deadline with its child unsettled: the
            # call stays running and the next attempt re-executes it (runtime/children.py).
            await progress.aclose()
            raise
        except ToolOutcomeUnknownError as exc:  # e.g. an MCP server lost mid-call
            status, result = self._interrupted(tool, f"was cut short ({exc})")
        except Exception as exc:
            status, result = ToolTaskStatus.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            self._running_tools.pop(running, None)
        # No progress write may land after (or race) the finish, which clears the field.
        await progress.aclose()
        # Only a call that completed wrote: a raise, a timeout or a cancellation discards the
        # writes with the run (the step did not complete).
        writes = state.seal()
        crash_point("tool.after-execute", tool.name)
        if self._agent.after_tool is not None and status in _RAN:
            # Before the commit: the recorded result is what the model reads, after a crash
            # too. Not on an interrupted call: that result is our account, not the tool's.
            result = await run_after_tool(self._agent.after_tool, task, status, result)
        return await self._finish(
            task,
            status,
            result,
            after_record=tool.name,
            merge=merge,
            writes=writes if status == ToolTaskStatus.COMPLETED else None,
            attachments=attached if status == ToolTaskStatus.COMPLETED else (),
        )

    def _runs(
        self,
        task: ToolTaskRecord,
        tool: Tool,
        arguments: pydantic.BaseModel,
        ctx: ToolContext,
        tool_state: ToolState,
    ) -> Awaitable[tuple[str, tuple[AttachmentRef, ...]]]:
        """The call's run, or with ``tool.retry`` its runs (runtime/tool_retry.py): each
        failed one recorded, its ``ctx.state`` writes dropped, before the backoff."""
        if tool.retry is None:
            return tool.run_with_attachments(arguments, ctx)

        def commit(failed_runs: int, error: str, delay_s: float) -> None:
            self._write_held(
                self._journal.record_tool_retry,
                task.id,
                failed_runs=failed_runs,
                error=error,
                delay_s=delay_s,
            )

        async def on_retry(failed_runs: int, exc: BaseException, delay_s: float) -> None:
            tool_state.drop_pending()  # a failed run's writes go with it
            await self._cross(commit, failed_runs, f"{type(exc).__name__}: {exc}", delay_s)

        return run_retrying(
            lambda: tool.run_with_attachments(arguments, ctx),
            tool.retry,
            on_retry=on_retry,
            sleep=self._sleep,
            rng=self._rng,
        )

    def _write_held(self, transition: Callable[..., ToolStep], task_id: str, **fields: Any) -> None:
        """One of a running call's own transitions (a step, a retry), written from the
        records the driver holds; what it committed is kept for the next one."""
        state = self._state
        assert state is not None
        state.noted(transition(self._fence, task_id, held=state.held(), **fields))

    def _child_sessions(self, task: ToolTaskRecord) -> ChildSessions | None:
        """A subagent call's child sessions, within this turn's budgets."""
        state = self._state
        if self._children is None or state is None:
            return None
        started = state.submission.started_at or self._now()
        return self._children.for_call(
            self._journal,
            self._fence,
            task.id,
            self._budget,
            turn_ends_at=started + self._agent.durability.timeout_s,
            clock=self._clock,
        )

    def _progress_pump(self, task: ToolTaskRecord) -> ProgressPump:
        """The throttled writer of this run's ``ctx.progress`` reports."""
        journal, fence, task_id, run = self._journal, self._fence, task.id, task.runs
        state = self._state
        assert state is not None

        def write(text: str) -> None:
            # Each write moves the task's version: the call's result is then written from
            # the task as this left it, not refused as stale and read again.
            state.note(journal.record_progress(fence, task_id, run=run, text=text))

        return ProgressPump(write, tool=task.tool)

    def _step_log(self, task: ToolTaskRecord, tool: Tool, tool_state: ToolState) -> StepLog:
        """The steps of this run of a durable call: those recorded by earlier runs replay.
        The call's ``ctx.state`` writes so far commit with each step's record."""

        def commit(name: str, value: str, error: str | None, writes: StateWrites) -> None:
            self._write_held(
                self._journal.record_step,
                task.id,
                name=name,
                value=value,
                error=error,
                writes=writes,
            )
            crash_point("tool.step.after-record", tool.name)

        async def record(name: str, value: str, error: str | None) -> None:
            # The step's function has returned (or raised): its effect happened, its record
            # is not yet durable. A crash here runs the step again on recovery (at least once).
            crash_point("tool.step.before-record", tool.name)
            writes = tool_state.pending()
            await self._cross(commit, name, value, error, writes)
            tool_state.committed(writes)

        recorded = {step.name: (step.value, step.error) for step in task.steps}
        return StepLog(tool.name, recorded, record, on_replay=tool_state.drop_pending)

    @staticmethod
    def _interrupted(tool: Tool, why: str, *, unknown: bool = False) -> tuple[ToolTaskStatus, str]:
        """A call stopped mid-flight: safe ones are simply cancelled, others (and any whose
        code may still run: ``unknown``) are unknown."""
        if tool.policy == "safe" and not unknown:
            return ToolTaskStatus.CANCELLED, f"{tool.name} {why}"
        return ToolTaskStatus.OUTCOME_UNKNOWN, f"{tool.name} {why}. " + unknown_message(tool.name)

    @tracing.tool_outcome
    async def _finish(
        self,
        task: ToolTaskRecord,
        status: ToolTaskStatus,
        result: str,
        *,
        after_record: str | None = None,
        merge: bool = True,
        writes: StateWrites | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> Outcome:
        """Record a tool call's result and, in the same crossing, prepare the next step: the
        next call's intent, or the next model request's read. ``after_record`` names the tool
        whose ``tool.after-record`` crash point follows the commit. ``writes``: a completed
        call's ``ctx.state`` writes, committed with its result. A batch's results that arrive
        together share one commit (runtime/batch.py ``ResultGroup``)."""
        recorded = ToolResult(task.id, status, result, writes, attachments=attachments)
        settling = _Settling(task, recorded, after_record, merge)
        if self._results is not None:
            return await self._results.submit(settling)
        (outcome,) = await self._cross(self._commit_results, [settling])
        return outcome

    def _commit_results(self, items: list[_Settling]) -> list[Outcome]:
        """In the crossing: commit ``items``' results (several: one ``finish_tools``), then
        what follows each, in order."""
        if len(items) > 1:
            try:
                steps = self._journal.finish_tools(
                    self._fence, [item.result for item in items], held=self._held()
                )
            except StateTooLargeError:
                # Nothing was written: each commits alone, where the one too large is
                # recorded failed.
                return [self._after_result(item, self._finish_one(item)) for item in items]
            return [self._after_result(item, step) for item, step in zip(items, steps, strict=True)]
        return [self._after_result(items[0], self._finish_one(items[0]))]

    def _held(self) -> Held | None:
        assert self._state is not None
        return self._state.held()

    def _finish_one(self, item: _Settling) -> ToolStep:
        # The next call's intent joins this commit where the loop would start it at once;
        # never a batch's call's (the batch's runner starts its own calls: recovery would
        # find the next one running without ever having run).
        start_next = self._next_intent if item.merge and self._gate is None else None
        r = item.result
        try:
            return self._journal.finish_tool(
                self._fence,
                r.task_id,
                r.status,
                r.result,
                writes=r.writes,
                attachments=r.attachments,
                start_next=start_next,
                held=self._held(),
            )
        except StateTooLargeError as exc:
            # Nothing was written: the call is recorded failed, and the model reads why,
            # rather than its writes being dropped behind a "completed".
            return self._journal.finish_tool(
                self._fence,
                item.task.id,
                ToolTaskStatus.FAILED,
                f"StateError: {exc}",
                start_next=start_next,
                held=self._held(),
            )

    def _after_result(self, item: _Settling, finished: ToolStep) -> Outcome:
        """After a result's commit, in its crossing: keep what it wrote, fire its crash
        points, and read the next model request if the loop will make it next."""
        state = self._state
        assert state is not None
        state.noted(finished)
        self._left_unstarted(item.task.id)
        if item.after_record is not None:
            # Where the next intent joined the commit, this is the same state as that
            # call's tool.after-intent (fired next): both are durable, it has not run.
            crash_point("tool.after-record", item.after_record)
            if running_child() is not None:  # a subagent's child, run inline by its parent
                crash_point("subagent.in-child", item.after_record)
        if finished.started is not None:
            return None, self._after_started(finished)
        if not item.merge:
            return None, None
        action = state.next_action()
        # The next model request is read in this crossing only if the loop will make it.
        if isinstance(action, CallModel) and isinstance(at_boundary(self._boundary()), GoOn):
            turn, known = state.turn, state.round_tasks
            request = None
            if state.session is not None:  # from what the commits wrote, if it can
                request = self._model_step.prepare_held(
                    turn, state.session, state.own_messages, known
                )
            if request is None:
                request = self._journal.read(lambda v: self._model_step.prepare(v, turn, known))
            if self._gate is not None:  # a batch's last result: the batch hands it on
                self._prepared_after_batch = request
            return request, None
        return None, None  # the loop decides the next step

    # -- endings -------------------------------------------------------------------------------

    async def _resolve_running(self, tasks: Sequence[ToolTaskRecord]) -> None:
        """Before settling: a task still ``running`` was cut short by a crash."""
        for task in tasks:
            if task.status != ToolTaskStatus.RUNNING:
                continue
            if task.policy == "safe":
                await self._finish(task, ToolTaskStatus.CANCELLED, "cancelled", merge=False)
            else:
                await self._finish(
                    task, ToolTaskStatus.OUTCOME_UNKNOWN, unknown_message(task.tool), merge=False
                )


# The statuses of an execution that returned or raised: ``after_tool`` runs on those.
_RAN = frozenset({ToolTaskStatus.COMPLETED, ToolTaskStatus.FAILED})
