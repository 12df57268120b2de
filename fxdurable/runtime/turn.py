"""The turn driver: runs one submission step by step, a durable record at every step.

For each step it asks :func:`next_action` what comes next, does it, and records it before
going on (DESIGN §3.4-3.6). At every step boundary it honours an abort intent, the
submission's budgets and the invocation's deadline.

A step costs one thread crossing and no read of its own. The driver reads the turn once per
attempt (``begin_attempt`` returns it with the turn's tasks) and then keeps it in memory: each
transition returns what it wrote as a frozen result (a :class:`~fxdurable.core.journal.ToolStep`
or :class:`~fxdurable.core.journal.ModelRound`, whose ``written`` holds the session's version,
steering and state and the submission's abort intent), which is everything the next decision
needs. The commit of one step and the preparation of the next share one crossing into the
durable core: a tool's result is committed and, in the same worker thread, the next call's
intent (or the next model request's read). That merge is skipped where code must run on the
loop in between: a ``before_tool`` hook, or a ``reuse=False`` refresh. The result and the next
intent stay two commits, never one: ``tool.after-record`` means "this result is durable and
the next call has not been promised", and recovery from it must find the next call
``pending`` (run normally, whatever its replay policy), not ``running`` (resolved by its
policy, an unsafe call left unknown without ever having run).

Several calls of one response run concurrently when their policies allow it (a *batch*,
:mod:`fxdurable.runtime.batch`): each is the same call as above, hook, intent, execution,
result, but no call's intent is merged into a batch's commits (the batch's runner starts its
own calls; only the round's last result also reads the next model request, as a call run alone
does), and every crossing of the turn goes through one :class:`TurnCrossings`, so only
the executions overlap. A batch is one step: the abort, budgets and the deadline are checked
before it starts and after all its calls have settled.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Sequence

import pydantic

from fxdurable.core.asking import Asked, waits_for_input
from fxdurable.core.clock import Clock
from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Exhausted, Fence, Journal, ModelRound, Outcome
from fxdurable.core.records import (
    AttachmentRef,
    ErrorInfo,
    InputRequest,
    ToolTaskRecord,
    TurnRecord,
)
from fxdurable.core.session_state import StateWrites
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.subagent import child_failure, child_session_id
from fxdurable.errors import (
    StateTooLargeError,
    SteeringPendingError,
    Suspend,
    ToolInputError,
    ToolOutcomeUnknownError,
)
from fxdurable.runtime import relay, tracing
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.batch import HookGate, TurnCrossings, parallel_batch, run_batch
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.children import ChildDriver, ChildSessions, abort_child, running_child
from fxdurable.runtime.conversation import ConversationCache
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.decide import (
    AbortTurn,
    AskExhausted,
    Boundary,
    CallModel,
    Complete,
    FailTurn,
    GiveUp,
    GoOn,
    RecoverTool,
    RefreshReads,
    RunTool,
    StopInvocation,
    at_boundary,
    is_blind_repeat,
    refusal_message,
    unknown_message,
)
from fxdurable.runtime.hooks import Ask, run_after_tool, run_before_tool
from fxdurable.runtime.leases import current_lease
from fxdurable.runtime.model_step import Failed, ModelStep, Prepared, Recorded, Retry, Sleep
from fxdurable.runtime.output import OutputExhausted, Rejected, judge_answer
from fxdurable.runtime.progress import ProgressPump
from fxdurable.runtime.spend import overspent
from fxdurable.runtime.state import ToolState
from fxdurable.runtime.steps import StepLog
from fxdurable.runtime.subagent import SubagentTool
from fxdurable.runtime.tool_records import BlobWriter, ToolRecords
from fxdurable.runtime.tools import Tool, ToolContext
from fxdurable.runtime.turn_state import ReadyTool, TurnState

__all__ = ["TurnDriver"]

log = logging.getLogger("fxdurable.turn")


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
        queue_delays_wakes: bool = False,
        children: ChildDriver | None = None,
    ) -> None:
        self._journal = journal
        self._children = children  # runs a subagent call's child session (fx.subagent)
        # Whether a continuation's wake can be delayed (SQS, the in-process queue): a model
        # backoff longer than the invocation then ends it at once instead of sleeping it out.
        self._queue_delays_wakes = queue_delays_wakes
        self._sleep = sleep
        self._conversations = ConversationCache() if conversations is None else conversations
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
        self._running_tools: set[asyncio.Future[tuple[str, tuple[AttachmentRef, ...]]]] = (
            set()
        )  # more than one in a batch
        self._cross = TurnCrossings()  # the crossings a batch's calls may make at once
        self._batch_unstarted: set[str] = set()  # a batch's calls whose intent is to come
        # The running batch's (None: no batch runs), between its hooks and its intents.
        self._gate: HookGate | None = None
        self._prepared_after_batch: Prepared | None = None  # read by the batch's last commit
        self._abort_seen = False
        self._state: TurnState | None = None
        # Set once the turn asked a person (``needs_input``): the attempt ended with the
        # question's commit, and the loop stops without another write.
        self._waiting = False

    # -- called by the heartbeat -------------------------------------------------------------

    def abort_requested(self) -> None:
        """Cancel the tools in flight (if any); the loop settles ``aborted`` at the boundary."""
        self._abort_seen = True
        for running in self._running_tools:
            running.cancel()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, submission_id: str) -> None:
        j = self._journal
        # A turn's id is its submission's.
        queued, turn = await durable(
            j.read, lambda view: (view.get_submission(submission_id), view.get_turn(submission_id))
        )
        if queued is not None and waits_for_input(queued):
            return  # a person's answer comes first; it enqueues the wake that resumes it
        if queued is not None and queued.status == "queued" and queued.abort_requested:
            # Aborted before it ever ran: it settles without a turn, so its prompt never
            # enters the conversation later turns are shown.
            await durable(j.settle, self._fence, submission_id, "aborted")
            return
        if turn is not None and turn.model_retry_at is not None:
            await self._wait_out_model_backoff(turn.model_retry_at)
        start = await durable(j.begin_attempt, self._fence, submission_id, worker=self._worker)
        self._attempt = start.attempt.number
        if start.recovered:
            # A recovery may re-run settled reads (reuse=False) and closes out partial text:
            # what this process held of the conversation is read again from the records.
            self._conversations.drop(start.turn.session_id)
        state = self._state = TurnState.of(start, max_pauses=self._agent.durability.max_pauses)
        first_boundary = True
        prepared: Prepared | None = None  # the next model request, read with the last commit
        go: ReadyTool | None = None  # a tool step whose intent the last crossing recorded
        while not self._waiting:
            if go is not None:  # its intent was recorded, after the boundary's checks
                prepared, go = await self._run_started(go.task, go.tool, go.arguments)
                continue
            action = state.next_action()
            if isinstance(action, Complete):
                # The records prove the final answer: finished work is never discarded, by an
                # abort that came after it or by a spent budget (DESIGN §4).
                if await self._settle_answer(submission_id, action.text):
                    return
                continue
            if isinstance(action, GiveUp):
                await self._fail(submission_id, action.code, action.message)
                return
            check = at_boundary(self._boundary(first=first_boundary, recovered=start.recovered))
            first_boundary = False
            match check:
                case AbortTurn():
                    await self._resolve_running(state.round_tasks)
                    await durable(j.settle, self._fence, submission_id, "aborted")
                    return
                case FailTurn(code=code, message=message, exhausted=exhausted):
                    await self._fail(submission_id, code, message, exhausted=exhausted)
                    return
                case AskExhausted(question=question, about=about):
                    await self._ask(question, about=about)
                    return
                case RefreshReads():
                    await self._refresh_stale_reads(state.round_tasks)
                    continue  # decide again (what was refreshed is recorded)
                case StopInvocation(reason=reason):
                    raise Suspend(reason)
            self._budget.record_progress()
            match action:
                case CallModel(round=round_):
                    settled, go = await self._call_model(state.turn, round_, prepared)
                    if settled:
                        return
                    prepared = None
                case RunTool() | RecoverTool() if len(batch := self._batch()) > 1:
                    prepared, go = await self._run_batch(batch)
                case RunTool(task=task):
                    prepared, go = await self._run_tool(task)
                case RecoverTool(task=task):
                    prepared, go = await self._recover_tool(task)

    def _now(self) -> float:
        return self._clock.now()

    async def _wait_out_model_backoff(self, retry_at: float) -> None:
        """Before an attempt begins: the model's last failure asked for a wait that has not
        ended (an early wake: the reconciliation scan, a duplicate, a queue that cannot delay).
        Sleep it out if it fits in this invocation; otherwise stop before recording anything,
        with a continuation delayed by the rest of the wait. A queue that cannot delay a wake
        (RQ) would bring the next one back at once, so this invocation sleeps for as long as
        it may first: a backoff never becomes a loop of empty wakes."""
        wait = retry_at - self._now()
        if wait <= 0:
            return
        remaining = self._budget.remaining()
        if remaining is None or wait < remaining:
            await self._sleep(wait)
            return
        if not self._queue_delays_wakes:
            await self._sleep(remaining)
            wait -= remaining
        raise Suspend("model backoff", resume_after_s=wait, attempt_started=False)

    def _boundary(self, *, first: bool = False, recovered: bool = False) -> Boundary:
        """The facts :func:`~fxdurable.runtime.decide.at_boundary` decides on, as of now."""
        state = self._state
        assert state is not None
        sub, durability = state.submission, self._agent.durability
        return Boundary(
            abort=state.abort_requested or self._abort_seen,
            timed_out=self._now() - (sub.started_at or 0.0) > durability.timeout_s,
            timeout_s=durability.timeout_s,
            stop_reason=self._budget.stop_reason(),
            first=first,
            recovered=recovered,
            interruptions=sub.interruptions,
            max_attempts=durability.max_attempts,
            on_exhausted=durability.on_exhausted,
            denied=_denied(sub.input_request, "exhausted"),
            overspent=overspent(self._agent.spending, state.turn),
            on_overspent=self._agent.spending.on_exhausted if self._agent.spending else "fail",
            spend_denied=_denied(sub.input_request, "budget"),
        )

    # -- the answer ----------------------------------------------------------------------------

    async def _settle_answer(self, submission_id: str, text: str) -> bool:
        """Settle ``completed`` with the final answer; True when the submission settled. A
        typed answer that does not validate is rejected instead, a recorded step the model
        reads (False: the loop calls it again), until its retries are spent."""
        state = self._state
        assert state is not None
        turn = state.turn
        verdict = judge_answer(
            self._agent.output,
            text,
            rejections=turn.output_rejections,
            retries=self._agent.output_retries,
        )
        if isinstance(verdict, OutputExhausted):
            await self._fail(submission_id, "output_invalid", verdict.message)
            return True
        if isinstance(verdict, Rejected):
            state.turn = await durable(
                self._journal.reject_output,
                self._fence,
                turn.id,
                round_=turn.rounds - 1,
                message=verdict.message,
            )
            crash_point("output.after-reject")
            return False
        try:
            await durable(
                self._journal.settle,
                self._fence,
                submission_id,
                "completed",
                text=text,
                output=verdict.output,
            )
        except SteeringPendingError:
            state.steering = state.steering or ("",)  # the model answers it
            return False
        return True

    # -- model ---------------------------------------------------------------------------------

    async def _call_model(
        self, turn: TurnRecord, round_: int, prepared: Prepared | None
    ) -> tuple[bool, ReadyTool | None]:
        """One model step: (True, None) when it settled the submission ``failed``; else the
        first tool step when its intent was recorded in the same crossing as the response."""
        outcome = await self._model_step.run(
            turn, round_, prepared=prepared, then=self._after_model_call
        )
        if isinstance(outcome, Failed):
            await self._fail(turn.submission_id, outcome.code, outcome.message)
            return True, None
        if isinstance(outcome, Retry) and outcome.turn is not None and self._state is not None:
            self._state.turn = outcome.turn  # a fallback switch: the next call uses its model
        if isinstance(outcome, Recorded) and isinstance(outcome.then, ReadyTool):
            return False, outcome.then
        return False, None

    def _after_model_call(self, recorded: ModelRound) -> ReadyTool | None:
        """In the model call's crossing, right after its commit: note what it wrote, and start
        its first tool call when nothing must run on the loop first."""
        assert self._state is not None
        self._state.noted(recorded)
        return self._start_next()

    # -- tools ---------------------------------------------------------------------------------

    def _batch(self) -> list[ToolTaskRecord]:
        """The calls the loop runs together next; one or none: the loop runs it on its own."""
        assert self._state is not None
        if not self._agent.parallel_tools:
            return []
        return parallel_batch(self._state.round_tasks, limit=self._agent.max_parallel_tools)

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
        try:
            await run_batch([(task.id, functools.partial(call, task)) for task in batch], gate)
        finally:
            self._batch_unstarted = set()
            self._gate = None
        # The loop decides the next step with its boundary checks; a model call next uses the
        # request the last result's crossing read, as after a call run alone.
        return self._prepared_after_batch, None

    def _ready(self, task: ToolTaskRecord) -> tuple[Tool, pydantic.BaseModel] | str:
        """The tool and its parsed input, or why the call fails without running."""
        tool = self._agent.tool(task.tool)
        if tool is None:
            known = ", ".join(t.name for t in self._agent.tools) or "none"
            return f"unknown tool {task.tool!r}; available tools: {known}"
        try:
            return tool, tool.parse(task.arguments)
        except ToolInputError as exc:
            return str(exc)

    def _blind_repeat(self, task: ToolTaskRecord, tool: Tool) -> bool:
        """The turn's own calls only: the model was told of the unknown outcome in this turn,
        and reading the session's whole history here would make a step cost grow with it."""
        assert self._state is not None
        if task.tool not in self._state.unknown_tools:
            return False  # no unknown outcome of this tool in the turn: nothing to repeat
        return is_blind_repeat(task, list(self._state.tasks.values()), tool.canonical_input)

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
            verdict = await run_before_tool(self._agent.before_tool, task)
            if isinstance(verdict, Ask):
                await self._ask(verdict.question, about="tool", task_id=task.id)
                return None, None
            if verdict is not None:
                return await self._finish(task, ToolTaskStatus.FAILED, f"denied: {verdict}")
        if self._gate is not None:  # a batch's call: every hook of the batch decides first
            await self._gate.arrive(task.id)
            if self._waiting:
                return None, None  # another call's hook asked a person: no intent
        started = await self._cross(self._start, task.id, None, tool.durable)
        crash_point("tool.after-intent", task.tool)
        return await self._execute(started, tool, arguments)

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

    def _start(self, task_id: str, reason: str | None, durable_run: bool = False) -> ToolTaskRecord:
        """Record a tool call's intent (sync: inside a crossing) and note what it wrote.
        ``durable_run``: a durable tool's run, which records (or replays) its steps."""
        assert self._state is not None
        started = self._journal.start_tool(self._fence, task_id, reason=reason, durable=durable_run)
        self._state.noted(started)
        self._left_unstarted(task_id)
        return started.task

    def _left_unstarted(self, task_id: str) -> None:
        """Inside a crossing: a call of the running batch was started or settled. After the
        last one, every call of the batch is executing or done (``tool.batch.running``)."""
        if task_id in self._batch_unstarted:
            self._batch_unstarted.discard(task_id)
            if not self._batch_unstarted:
                crash_point("tool.batch.running")

    def _start_next(self) -> ReadyTool | None:
        """Inside the crossing of the commit before it: record the next tool call's intent if
        it is one the loop would start at once. None when the loop must decide on its own (a
        hook to run, a call to refuse or fail, an abort, a budget spent, a model call)."""
        state = self._state
        assert state is not None
        action = state.next_action()
        if not isinstance(action, RunTool) or self._agent.before_tool is not None:
            return None
        if action.task.answer is not None:
            return None  # a person's answer to apply first (a deny must not start it)
        if len(self._batch()) > 1:
            return None  # its calls start together, after the boundary's checks
        if not isinstance(at_boundary(self._boundary()), GoOn):
            return None  # the loop does what the boundary decides
        ready = self._ready(action.task)
        if isinstance(ready, str) or self._blind_repeat(action.task, ready[0]):
            return None
        self._budget.record_progress()
        started = self._start(action.task.id, None, ready[0].durable)
        crash_point("tool.after-intent", started.tool)
        return ReadyTool(started, *ready)

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
        )
        progress.start()
        running = asyncio.ensure_future(tool.run_with_attachments(arguments, ctx))
        self._running_tools.add(running)
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
            self._running_tools.discard(running)
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

        def write(text: str) -> None:
            journal.record_progress(fence, task_id, run=run, text=text)

        return ProgressPump(write, tool=task.tool)

    def _step_log(self, task: ToolTaskRecord, tool: Tool, tool_state: ToolState) -> StepLog:
        """The steps of this run of a durable call: those recorded by earlier runs replay.
        The call's ``ctx.state`` writes so far commit with each step's record."""
        state = self._state
        assert state is not None

        def commit(name: str, value: str, writes: StateWrites) -> None:
            state.noted(
                self._journal.record_step(
                    self._fence, task.id, name=name, value=value, writes=writes
                )
            )
            crash_point("tool.step.after-record", tool.name)

        async def record(name: str, value: str) -> None:
            # The step's function has returned: its effect happened, its record is not yet
            # durable. A crash here runs the step again on recovery (at least once).
            crash_point("tool.step.before-record", tool.name)
            writes = tool_state.pending()
            await self._cross(commit, name, value, writes)
            tool_state.committed(writes)

        recorded = {step.name: step.value for step in task.steps}
        return StepLog(tool.name, recorded, record, on_replay=tool_state.drop_pending)

    @staticmethod
    def _interrupted(tool: Tool, why: str) -> tuple[ToolTaskStatus, str]:
        """A call stopped mid-flight: safe ones are simply cancelled, others are unknown."""
        if tool.policy == "safe":
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
    ) -> tuple[Prepared | None, ReadyTool | None]:
        """Record a tool call's result and, in the same crossing, prepare the next step: the
        next call's intent, or the next model request's read. ``after_record`` names the tool
        whose ``tool.after-record`` crash point follows the commit. ``writes``: a completed
        call's ``ctx.state`` writes, committed with its result."""
        state = self._state
        assert state is not None

        def commit() -> tuple[Prepared | None, ReadyTool | None]:
            try:
                finished = self._journal.finish_tool(
                    self._fence, task.id, status, result, writes=writes, attachments=attachments
                )
            except StateTooLargeError as exc:
                # Nothing was written: the call is recorded failed, and the model reads why,
                # rather than its writes being dropped behind a "completed".
                finished = self._journal.finish_tool(
                    self._fence, task.id, ToolTaskStatus.FAILED, f"StateError: {exc}"
                )
            state.noted(finished)
            self._left_unstarted(task.id)
            if after_record is not None:
                crash_point("tool.after-record", after_record)
                if running_child() is not None:  # a subagent's child, run inline by its parent
                    crash_point("subagent.in-child", after_record)
            if not merge:
                return None, None
            action = state.next_action()
            # The next model request is read in this crossing only if the loop will make it.
            if isinstance(action, CallModel) and isinstance(at_boundary(self._boundary()), GoOn):
                turn, known = state.turn, state.round_tasks
                request = self._journal.read(lambda v: self._model_step.prepare(v, turn, known))
                if self._gate is not None:  # a batch's last result: the batch hands it on
                    self._prepared_after_batch = request
                return request, None
            if self._gate is not None:  # a batch's call
                # Never the next call's intent: the batch's runner would not run it, and
                # recovery would find it running without ever having run.
                return None, None
            return None, self._start_next()

        return await self._cross(commit)

    # -- questions -----------------------------------------------------------------------------

    async def _ask(self, question: str, *, about: Asked, task_id: str | None = None) -> None:
        """Record the question and end the attempt with it (one transaction); the loop then
        stops and the worker lets go of the lease. The answer's wake resumes the turn."""
        state = self._state
        assert state is not None
        await self._cross(
            self._journal.request_input,
            self._fence,
            state.submission.id,
            question=question,
            about=about,
            task_id=task_id,
        )
        self._waiting = True
        log.info("submission %s waits for a person's answer (%s)", state.submission.id, about)

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

    async def _fail(
        self,
        submission_id: str,
        code: str,
        message: str,
        *,
        exhausted: Exhausted | None = None,
    ) -> None:
        j = self._journal
        state = self._state
        assert state is not None
        await self._resolve_running(state.round_tasks)
        unknown = tuple(
            # A subagent call's marker names its child, whose own records say how far it got.
            f"{t.tool} ({t.id}"
            + (f"; child session {t.child_session})" if t.child_session else ")")
            for t in state.tasks.values()
            if t.status == ToolTaskStatus.OUTCOME_UNKNOWN
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
        for task in state.tasks.values():
            if task.status == ToolTaskStatus.OUTCOME_UNKNOWN and task.child_session:
                await abort_child(j, task.child_session)  # nobody will read its answer


# The statuses of an execution that returned or raised: ``after_tool`` runs on those.
_RAN = frozenset({ToolTaskStatus.COMPLETED, ToolTaskStatus.FAILED})


def _denied(request: InputRequest | None, about: Asked) -> str | None:
    """The reason a person gave for denying a turn whose attempts (``about="exhausted"``) or
    spending budget (``"budget"``) ran out, if they did."""
    if request is None or request.about != about or request.answer is None:
        return None
    if request.answer.kind != "deny":
        return None
    return request.answer.reason or "denied by a person"
