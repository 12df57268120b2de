"""The turn driver: runs one submission step by step, a durable record at every step.

For each step it asks :func:`next_action` what comes next, does it, and records it before
going on (DESIGN §3.4-3.6). At every step boundary it honours an abort intent, the
submission's budgets and the invocation's deadline.

A step costs one thread crossing, one commit and no read of its own. The driver reads the
turn once per attempt (``begin_attempt`` returns it with the turn's tasks) and then keeps it in
memory: each transition returns what it wrote as a frozen result (a
:class:`~fxdurable.core.journal.ToolStep` or :class:`~fxdurable.core.journal.ModelRound`, whose
``written`` holds the session row as written, its steering and state and the submission's
abort intent), which is everything the next decision needs, and what the next transition
writes from (``held``: no record is read again; the store fences the writes by the held
versions in the statements, and a stale one falls back to the ordinary read-check-write).

Commits may be shared, never reordered (DESIGN §3.4). A tool's result and the next call's
intent are one commit, and a model response and its first call's intent are one: the decision
whether the next call starts (:meth:`TurnBase._next_intent`) is made inside that transaction,
on the turn as the commit leaves it, so it sees the steering and abort intent the commit
read. A call starts in the commit before it only when the loop would start it at once: never
where a ``before_tool`` hook must run first (it runs on the loop, and a crash inside it must
not take the previous result with it: a hook's call keeps its result committed alone), a
person's answer applies, or the boundary (abort, budgets, deadline) says otherwise. The
round's last result commits on its own, and the next model request is read in its crossing.
``tool.after-record:<tool>`` fires after the result's commit; where the next intent joined
it, that is the same state as the next call's ``tool.after-intent``, which fires right after:
recovery finds the next call ``running`` and resolves it by its policy.

Several calls of one response run concurrently when their policies allow it (a *batch*,
:mod:`fxdurable.runtime.batch`): each runs its own hook, then waits at the batch's gate; once
every hook has passed, the intents of the calls at the gate are one commit (``start_tools``),
then each executes and commits its own result. No call's intent is merged into a batch's
result commits (the batch's runner starts its own calls; only the round's last result also
reads the next model request, as a call run alone does), and every crossing of the turn goes
through one :class:`TurnCrossings`, so only the executions overlap. A batch is one step: the
abort, budgets and the deadline are checked before it starts and after all its calls have
settled.
"""

from __future__ import annotations

import logging

from fxdurable.core.crash import crash_point
from fxdurable.core.journal import AttemptStart, Exhausted, ModelRound, Outcome, before_attempt
from fxdurable.core.records import (
    ErrorInfo,
    TurnRecord,
)
from fxdurable.core.states import ToolTaskStatus
from fxdurable.errors import (
    SteeringPendingError,
    Suspend,
)
from fxdurable.runtime.children import abort_child
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.decide import (
    AbortTurn,
    AskExhausted,
    CallModel,
    Complete,
    FailTurn,
    GiveUp,
    RecoverTool,
    RefreshReads,
    RunTool,
    StopInvocation,
    at_boundary,
)
from fxdurable.runtime.model_step import Failed, Prepared, Recorded, Retry
from fxdurable.runtime.output import OutputExhausted, Rejected, judge_answer
from fxdurable.runtime.tool_calls import ToolCalls
from fxdurable.runtime.turn_state import ReadyTool, TurnState

__all__ = ["TurnDriver"]

log = logging.getLogger("fxdurable.turn")


class TurnDriver(ToolCalls):
    """Drives one submission within one attempt. Raises :class:`Suspend` at a deadline."""

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, submission_id: str, *, start: AttemptStart | None = None) -> None:
        """Run the submission's attempt: from ``start`` when the wake's claim began it in its
        own commit (``Journal.claim_wake``), else after what must come first."""
        j = self._journal
        if start is None:
            # A turn's id is its submission's.
            queued, turn = await durable(
                j.read,
                lambda view: (view.get_submission(submission_id), view.get_turn(submission_id)),
            )
            match before_attempt(queued, turn):
                case "wait_for_answer":
                    return  # the person's answer enqueues the wake that resumes it
                case "settle_aborted":
                    # Aborted before it ever ran: it settles without a turn, so its prompt
                    # never enters the conversation later turns are shown.
                    await durable(
                        j.settle, self._fence, submission_id, "aborted", webhook=self._owes_webhook
                    )
                    return
                case "back_off":
                    assert turn is not None and turn.model_retry_at is not None
                    await self._wait_out_model_backoff(turn.model_retry_at)
            start = await durable(
                j.begin_attempt,
                self._fence,
                submission_id,
                worker=self._worker,
                agent_version=self._agent.version,
            )
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
                    await durable(
                        j.settle, self._fence, submission_id, "aborted", webhook=self._owes_webhook
                    )
                    return
                case FailTurn(code=code, message=message, exhausted=exhausted):
                    await self._fail(submission_id, code, message, exhausted=exhausted)
                    return
                case AskExhausted(question=question, about=about):
                    # The attempts question is timed by Durability, the budget's by the
                    # SpendingBudget that asks it.
                    timed = self._agent.durability if about == "exhausted" else self._agent.spending
                    assert timed is not None  # a budget question needs a SpendingBudget
                    await self._ask(
                        question,
                        about=about,
                        timeout_s=timed.ask_timeout_s,
                        on_timeout=timed.ask_on_timeout,
                    )
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
                webhook=self._owes_webhook,
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
        state = self._state
        assert state is not None
        outcome = await self._model_step.run(
            turn,
            round_,
            prepared=prepared,
            then=self._after_model_call,
            start_next=self._next_intent,
            held=state.held,
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
        """In the model call's crossing, right after its commit: note what it wrote; its
        first tool call is the next step if its intent joined the commit."""
        assert self._state is not None
        self._state.noted(recorded)
        return self._after_started(recorded)

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
            webhook=self._owes_webhook,
        )
        log.warning("submission %s failed: %s", submission_id, message)
        for task in state.tasks.values():
            if task.status == ToolTaskStatus.OUTCOME_UNKNOWN and task.child_session:
                await abort_child(j, task.child_session)  # nobody will read its answer
