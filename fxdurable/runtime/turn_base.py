"""What the turn driver's parts share: its state between steps, the boundary facts, and the
decisions about the next tool call that run inside the crossing of the commit before it.

:class:`TurnBase` is the bottom of the driver (:mod:`fxdurable.runtime.turn`): its tool-call
path is :mod:`fxdurable.runtime.tool_calls`, its loop and model steps
:class:`~fxdurable.runtime.turn.TurnDriver`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import pydantic

from fxdurable.core.asking import Asked, OnTimeout
from fxdurable.core.clock import Clock
from fxdurable.core.crash import crash_point
from fxdurable.core.journal import Fence, Journal, ModelRound, StartNext, ToolStep
from fxdurable.core.records import (
    AttachmentRef,
    InputRequest,
    ToolTaskRecord,
)
from fxdurable.errors import (
    ToolInputError,
)
from fxdurable.runtime.agent import Agent
from fxdurable.runtime.batch import HookGate, ResultGroup, TurnCrossings, parallel_batch
from fxdurable.runtime.budget import InvocationBudget
from fxdurable.runtime.children import ChildDriver
from fxdurable.runtime.conversation import ConversationCache
from fxdurable.runtime.decide import (
    Boundary,
    GoOn,
    RunTool,
    at_boundary,
    is_blind_repeat,
)
from fxdurable.runtime.model_step import ModelStep, Prepared, Sleep
from fxdurable.runtime.spend import overspent
from fxdurable.runtime.tools import Tool
from fxdurable.runtime.turn_state import ReadyTool, TurnState

__all__ = ["TurnBase"]

log = logging.getLogger("fxdurable.turn")


class TurnBase:
    """The driver's state between steps and the decisions every part of it shares."""

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
        # Each settlement owes the agent's webhook (runtime/webhooks.py), in its commit.
        self._owes_webhook = agent.webhook is not None
        self._fence = fence
        self._budget = budget
        self._worker = worker
        self._clock = clock
        self._rng = rng or random.Random()  # backoff jitter: models' and tools' retries
        self._model_step = ModelStep(
            journal,
            agent,
            fence,
            budget,
            sleep=sleep,
            rng=self._rng,
            conversations=self._conversations,
        )
        self._attempt = 0
        # The tool calls running now (more than one in a batch), each with when it began.
        self._running_tools: dict[asyncio.Future[tuple[str, tuple[AttachmentRef, ...]]], float] = {}
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
        # What _next_intent parsed of a call it started in the commit before it.
        self._parsed: dict[str, tuple[Tool, pydantic.BaseModel]] = {}
        # A running batch's calls at its gate (id: durable run), in the order they arrived,
        # and the one commit of their intents once the gate opens.
        self._arrived: dict[str, bool] = {}
        self._batch_intents: asyncio.Future[dict[str, ToolTaskRecord]] | None = None
        # A running batch's group commit of its results (None: no batch runs).
        self._results: ResultGroup[Any, tuple[Prepared | None, ReadyTool | None]] | None = None

    # -- called by the heartbeat -------------------------------------------------------------

    def abort_requested(self) -> None:
        """Cancel the tools in flight (if any) and cut a streaming reply; the loop settles
        ``aborted`` at the boundary."""
        self._abort_seen = True
        for running in self._running_tools:
            running.cancel()
        if self._model_step.live is not None:
            self._model_step.live.cut()

    # -- called by the interrupt watcher (runtime/interrupts.py) -------------------------------

    def steered(self, steering: int) -> None:
        """``steering`` entries wait: cut a streaming reply whose request showed fewer (the
        loop then asks again, with them). A tool call is never cut by a steer."""
        live = self._model_step.live
        if live is not None and steering > live.steering:
            live.cut()

    def call_age(self) -> float | None:
        """How long the oldest tool or model call running now has run, in seconds (None: none
        runs). The watcher polls the store only once a call has run a poll period."""
        starts = list(self._running_tools.values())
        if self._model_step.live is not None:
            starts.append(self._model_step.live.started)
        return time.monotonic() - min(starts) if starts else None

    def _now(self) -> float:
        return self._clock.now()

    def _boundary(
        self, *, first: bool = False, recovered: bool = False, state: TurnState | None = None
    ) -> Boundary:
        """The facts :func:`~fxdurable.runtime.decide.at_boundary` decides on, as of now
        (``state``: the turn as a commit about to be made leaves it; the driver's own else)."""
        state = state or self._state
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
            question_failed=_timed_out_fail(sub.input_request),
        )

    # -- tools ---------------------------------------------------------------------------------

    def _batch(self, state: TurnState | None = None) -> list[ToolTaskRecord]:
        """The calls the loop runs together next; one or none: the loop runs it on its own."""
        state = state or self._state
        assert state is not None
        if not self._agent.parallel_tools:
            return []
        return parallel_batch(state.open_round_tasks(), limit=self._agent.max_parallel_tools)

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

    def _blind_repeat(
        self, task: ToolTaskRecord, tool: Tool, state: TurnState | None = None
    ) -> bool:
        """The turn's own calls only: the model was told of the unknown outcome in this turn,
        and reading the session's whole history here would make a step cost grow with it."""
        state = state or self._state
        assert state is not None
        if task.tool not in state.unknown_tools:
            return False  # no unknown outcome of this tool in the turn: nothing to repeat
        return is_blind_repeat(task, list(state.tasks.values()), tool.canonical_input)

    def _start(self, task_id: str, reason: str | None, durable_run: bool = False) -> ToolTaskRecord:
        """Record a tool call's intent (sync: inside a crossing) and note what it wrote.
        ``durable_run``: a durable tool's run, which records (or replays) its steps."""
        assert self._state is not None
        started = self._journal.start_tool(
            self._fence, task_id, reason=reason, durable=durable_run, held=self._state.held()
        )
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

    def _next_intent(self, step: ToolStep | ModelRound) -> StartNext | None:
        """Inside the transaction of a result or a model response (``step``, as it will
        commit): the next tool call whose intent joins that commit, if it is one the loop
        would start at once. None when the loop must decide on its own: a hook to run (it
        runs on the loop, before the intent), a person's answer to apply, a batch (its
        intents commit together once its hooks have passed), a call to refuse or fail, an
        abort, a budget spent, a model call. Asked again if the store re-runs the body, so it
        changes nothing: what it parsed is kept for :meth:`_after_started`."""
        assert self._state is not None
        state = self._state.peeked(step)
        action = state.next_action()
        if not isinstance(action, RunTool) or self._agent.before_tool is not None:
            return None
        if action.task.answer is not None:
            return None  # a person's answer to apply first (a deny must not start it)
        if len(self._batch(state)) > 1:
            return None  # its calls start together, after the boundary's checks
        if not isinstance(at_boundary(self._boundary(state=state)), GoOn):
            return None  # the loop does what the boundary decides
        ready = self._ready(action.task)
        if isinstance(ready, str) or self._blind_repeat(action.task, ready[0], state):
            return None
        self._parsed[action.task.id] = ready
        return StartNext(action.task.id, durable=ready[0].durable)

    def _after_started(self, step: ToolStep | ModelRound) -> ReadyTool | None:
        """After a commit that carried the next call's intent (``step.started``): that call
        is the next step, and its ``tool.after-intent`` is this commit."""
        if step.started is None:
            return None
        started = step.started.task
        tool, arguments = self._parsed.pop(started.id)
        self._budget.record_progress()
        crash_point("tool.after-intent", started.tool)
        return ReadyTool(started, tool, arguments)

    # -- questions -----------------------------------------------------------------------------

    async def _ask(
        self,
        question: str,
        *,
        about: Asked,
        task_id: str | None = None,
        timeout_s: float | None = None,
        on_timeout: OnTimeout = "deny",
    ) -> None:
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
            timeout_s=timeout_s,
            on_timeout=on_timeout,
        )
        self._waiting = True
        log.info("submission %s waits for a person's answer (%s)", state.submission.id, about)


def _timed_out_fail(request: InputRequest | None) -> str | None:
    """Why the turn fails: its question expired unanswered with ``on_timeout="fail"``."""
    answer = None if request is None else request.answer
    if request is None or answer is None or not answer.timed_out:
        return None
    if request.on_timeout != "fail":
        return None
    return f"the question went unanswered ({answer.reason}): {request.question}"


def _denied(request: InputRequest | None, about: Asked) -> str | None:
    """The reason a person gave for denying a turn whose attempts (``about="exhausted"``) or
    spending budget (``"budget"``) ran out, if they did."""
    if request is None or request.about != about or request.answer is None:
        return None
    if request.answer.kind != "deny":
        return None
    return request.answer.reason or "denied by a person"
