"""Turns and attempts: an attempt starts (or resumes) a submission's turn, yields at a step
boundary, and the turn settles with its one terminal outcome."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from fxdurable.core.asking import waits_for_input
from fxdurable.core.crash import crash_point
from fxdurable.core.events import (
    AttemptRun,
    AttemptYielded,
    EventType,
    ModelText,
    SteerRequeued,
    SubmissionInterrupted,
    SubmissionSettled,
    TurnStarted,
    settled_event,
)
from fxdurable.core.records import (
    AttemptRecord,
    ErrorInfo,
    PendingWebhook,
    SubmissionRecord,
    TurnRecord,
)
from fxdurable.core.states import (
    AttemptStatus,
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
    TurnStatus,
    advance,
)
from fxdurable.core.store import Tx
from fxdurable.errors import IllegalTransitionError, SteeringPendingError

from ._base import (
    AttemptStart,
    Exhausted,
    Fence,
    Outcome,
    Transitions,
    _owned,
    _put_attempt,
    _put_submission,
    _put_task,
    _running_attempt,
    _submission,
)
from ._scope import _SessionScope

_SUBMISSION_OUTCOME = {
    "completed": SubmissionStatus.COMPLETED,
    "failed": SubmissionStatus.FAILED,
    "aborted": SubmissionStatus.ABORTED,
}
_TURN_OUTCOME = {
    "completed": TurnStatus.COMPLETED,
    "failed": TurnStatus.FAILED,
    "aborted": TurnStatus.ABORTED,
}


#: What must come before a submission's attempt may begin (:func:`before_attempt`).
BeforeAttempt = Literal["wait_for_answer", "settle_aborted", "back_off", "begin"]


def before_attempt(sub: SubmissionRecord | None, turn: TurnRecord | None) -> BeforeAttempt:
    """The one decision of what precedes an attempt of the session's oldest unsettled
    submission ``sub`` (its turn ``turn``, None before it first ran), shared by the turn
    driver and by a wake's claim, which begins the attempt in its own commit only where this
    says ``begin``: a person's answer comes first (``wait_for_answer``: the answer wakes the
    session); a submission aborted before it ever ran settles without a turn
    (``settle_aborted``); a model call that failed waits out its backoff (``back_off``)."""
    if sub is not None and waits_for_input(sub):
        return "wait_for_answer"
    if sub is not None and sub.status == SubmissionStatus.QUEUED and sub.abort_requested:
        return "settle_aborted"
    if turn is not None and turn.model_retry_at is not None:
        return "back_off"
    return "begin"


class Turns(Transitions):
    def begin_attempt(
        self,
        fence: Fence,
        submission_id: str,
        *,
        worker: str,
        agent_version: str | None = None,
    ) -> AttemptStart:
        """Start an attempt; a queued submission starts its turn, a running one resumes it.
        ``agent_version``: the version of the agent that runs it, recorded on the attempt
        (and on the turn it starts).

        An attempt still ``running`` from before was cut short by a crash: it is recorded
        ``interrupted`` and counts against the submission's attempt budget.
        """

        def body(tx: Tx, scope: _SessionScope) -> AttemptStart:
            return begin_in(
                tx, scope, fence, submission_id, worker=worker, agent_version=agent_version
            )

        return self._transition(fence, body)

    def suspend(self, fence: Fence, submission_id: str, *, reason: str) -> None:
        """End the attempt cleanly at a step boundary; a continuation wake follows."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            _owned(fence, _submission(tx, submission_id))
            last = _running_attempt(tx, submission_id)
            _put_attempt(tx, last, AttemptStatus.YIELDED, reason, scope.now)
            scope.emit(
                EventType.ATTEMPT_YIELDED,
                AttemptYielded(number=last.number, reason=reason),
                turn_id=submission_id,
            )

        self._transition(fence, body)

    def settle(
        self,
        fence: Fence,
        submission_id: str,
        outcome: Outcome,
        *,
        text: str | None = None,
        error: ErrorInfo | None = None,
        exhausted: Exhausted | None = None,
        output: str | None = None,
        webhook: bool = False,
    ) -> SubmissionRecord:
        """Give the submission its one terminal outcome, with its turn and attempt.

        Pending tool tasks are cancelled; running ones must have been resolved first (their
        outcome is evidence, not something to discard). The session comes to rest when
        nothing else is unsettled. ``exhausted`` names the budget a ``failed`` submission ran
        out of; if crashes interrupted it, the advisory ``submission.interrupted`` (naming
        the calls left unknown) lands just before ``submission.failed``. ``output``: a typed
        final answer's validated value as JSON text, kept with the answer's text.
        ``webhook``: the agent has a settlement webhook; it is owed (``session.webhooks``)
        from this commit on, so the session stays active until it is delivered or abandoned.
        """

        def body(tx: Tx, scope: _SessionScope) -> SubmissionRecord:
            sub = _owned(fence, _submission(tx, submission_id))
            target = advance("submission", sub.status, _SUBMISSION_OUTCOME[outcome])
            steering = scope.session.steering
            if steering and outcome == "completed":
                raise SteeringPendingError(
                    f"submission {submission_id!r} cannot complete: steering arrived after "
                    "the model's answer, so the model must be called again"
                )
            turn = tx.get_turn(submission_id)
            if turn is not None:
                for task in tx.tool_tasks(turn.id):
                    if task.status == ToolTaskStatus.PENDING:
                        _put_task(
                            tx, task, ToolTaskStatus.CANCELLED, result="cancelled", now=scope.now
                        )
                    elif task.status == ToolTaskStatus.RUNNING:
                        raise IllegalTransitionError("tool_task", task.status, "settled turn")
                tx.put_turn(
                    replace(
                        turn,
                        status=advance("turn", turn.status, _TURN_OUTCOME[outcome]),
                        final_text=text,
                        version=turn.version + 1,
                    ),
                    expected_version=turn.version,
                )
            attempts = tx.attempts(submission_id)
            if attempts and attempts[-1].status == AttemptStatus.RUNNING:
                _put_attempt(tx, attempts[-1], AttemptStatus.FINISHED, outcome, scope.now)
            settled = replace(
                sub,
                status=target,
                result_text=text,
                output=output,
                error=error,
                settled_at=scope.now,
            )
            _put_submission(tx, settled)
            if outcome == "failed" and exhausted is not None and sub.interruptions:
                scope.emit(
                    EventType.SUBMISSION_INTERRUPTED,
                    SubmissionInterrupted(
                        submission=sub.id,
                        interruptions=sub.interruptions,
                        unknown_calls=error.unknown_calls if error is not None else (),
                        reason=exhausted,
                    ),
                    turn_id=submission_id,
                )
            scope.emit(
                settled_event(outcome),
                SubmissionSettled(
                    submission=sub.id,
                    text=text,
                    error=error,
                    output=None if output is None else json.loads(output),
                ),
                turn_id=submission_id,
            )
            if webhook:
                owed = PendingWebhook(submission_id=sub.id)
                scope.session = replace(scope.session, webhooks=(*scope.session.webhooks, owed))
            others = [s for s in tx.unsettled_submissions(sub.session_id) if s.id != sub.id]
            if steering:
                # The turn it steered failed before a model call could deliver it: it is
                # queued as a submission of its own rather than lost.
                scope.session = replace(scope.session, steering=())
                requeued = self._queue_submission(tx, scope, "\n\n".join(steering))
                scope.emit(
                    EventType.STEER_REQUEUED,
                    SteerRequeued(count=len(steering), submission=requeued.id),
                )
            elif not others and not scope.session.webhooks:
                scope.set_status(SessionStatus.IDLE)
            # The last step of the body: the template's commit follows.
            crash_point("turn.in-commit")
            return replace(settled, version=sub.version + 1)

        return self._transition(fence, body)


@dataclass(frozen=True, slots=True)
class BeginReads:
    """What an attempt begins from, read in its transaction: the session's unsettled
    submissions (oldest first), and the attempts and turn of the one that begins."""

    unsettled: Sequence[SubmissionRecord]
    attempts: Sequence[AttemptRecord]
    turn: TurnRecord | None


def begin_in(
    tx: Tx,
    scope: _SessionScope,
    fence: Fence,
    submission_id: str,
    *,
    worker: str,
    agent_version: str | None,
    reads: BeginReads | None = None,
) -> AttemptStart:
    """``begin_attempt``'s body, inside a transaction that opened ``scope`` on the session
    ``fence`` holds (``begin_attempt`` itself, or a wake's claim that begins the attempt in
    its own commit: ``Leases.claim_wake``). ``reads``: what it decides from, when the caller
    has read it in this transaction already (it is not read again)."""
    if reads is None:
        reads = BeginReads(
            tx.unsettled_submissions(fence.session_id),
            tx.attempts(submission_id),
            tx.get_turn(submission_id),
        )
    first = reads.unsettled
    oldest = first[0] if first and first[0].id == submission_id else None
    sub = _owned(fence, oldest or _submission(tx, submission_id))
    if oldest is None:
        # Per-session order (DESIGN §3.2): only the oldest unsettled submission runs.
        raise IllegalTransitionError("submission", sub.status, "running out of order")
    if waits_for_input(sub):
        raise IllegalTransitionError("submission", "needs_input", "an attempt unanswered")
    recovered = False
    previous = reads.attempts
    if previous and previous[-1].status == AttemptStatus.RUNNING:
        last = previous[-1]
        _put_attempt(tx, last, AttemptStatus.INTERRUPTED, "crash", scope.now)
        sub = replace(sub, interruptions=sub.interruptions + 1)
        scope.emit(
            EventType.ATTEMPT_INTERRUPTED,
            AttemptRun(number=last.number, worker=last.worker, agent_version=last.agent_version),
            turn_id=sub.id,
        )
        recovered = True
    turn = reads.turn  # the recovery above writes attempts, not the turn
    if recovered and turn is not None and turn.partial_text:
        turn = _close_out_partial(tx, scope, turn)
    if sub.status == SubmissionStatus.QUEUED:
        sub = replace(
            sub,
            status=advance("submission", sub.status, SubmissionStatus.RUNNING),
            started_at=scope.now,
        )
        turn = TurnRecord(
            id=sub.id,
            session_id=sub.session_id,
            submission_id=sub.id,
            status=advance("turn", None, TurnStatus.RUNNING),
            agent_version=agent_version,
            session_spent=scope.session.spent,
        )
        tx.put_turn(turn, expected_version=None)
        scope.append_message(turn.id, "user", sub.prompt, attachments=sub.attachments)
        scope.emit(EventType.TURN_STARTED, TurnStarted(prompt=sub.prompt), turn_id=turn.id)
    elif sub.status != SubmissionStatus.RUNNING or turn is None:
        raise IllegalTransitionError("submission", sub.status, SubmissionStatus.RUNNING)
    attempt = AttemptRecord(
        submission_id=sub.id,
        number=sub.attempts + 1,
        status=advance("attempt", None, AttemptStatus.RUNNING),
        worker=worker,
        started_at=scope.now,
        agent_version=agent_version,
    )
    tx.put_attempt(attempt, expected_version=None)
    sub = replace(sub, attempts=attempt.number)
    _put_submission(tx, sub)
    sub = replace(sub, version=sub.version + 1)
    scope.emit(
        EventType.ATTEMPT_STARTED,
        AttemptRun(number=attempt.number, worker=worker, agent_version=agent_version),
        turn_id=turn.id,
    )
    last_call = tx.get_model_call(turn.id, turn.rounds - 1) if turn.rounds else None
    return AttemptStart(
        submission=sub,
        turn=turn,
        attempt=attempt,
        recovered=recovered,
        last_call=last_call,
        tasks=tuple(tx.tool_tasks(turn.id)) if turn.rounds else (),
        steering=scope.session.steering,
    )


def _close_out_partial(tx: Tx, scope: _SessionScope, turn: TurnRecord) -> TurnRecord:
    """The dead attempt's streamed text becomes an interrupted assistant entry of its round
    (``model.interrupted``), at most once per round: a later cut of a round already closed
    out asks the model again from the first cut's text. Either way the turn no longer
    holds a partial, so no crash shape leaves the conversation looking mid-stream."""
    round_ = turn.rounds
    # The running turn's messages all lie past the latest compaction (a compaction only
    # covers earlier turns), so the read need not start at the session's first message.
    closed = any(
        m.interrupted and m.turn_id == turn.id and m.round == round_
        for m in tx.messages(turn.session_id, after=scope.session.compacted_upto)
    )
    if not closed:
        scope.append_message(
            turn.id, "assistant", turn.partial_text, round_=round_, interrupted=True
        )
        scope.emit(
            EventType.MODEL_INTERRUPTED,
            ModelText(round=round_, text=turn.partial_text),
            turn_id=turn.id,
        )
    updated = replace(turn, partial_text="", version=turn.version + 1)
    tx.put_turn(updated, expected_version=turn.version)
    return updated
