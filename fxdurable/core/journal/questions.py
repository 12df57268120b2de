"""Questions and answers: a turn asks a person and waits (``needs_input``); the answer makes
its submission runnable again. Needs no lease: the waiting turn holds none."""

from __future__ import annotations

from dataclasses import replace

from fxdurable.core.asking import (
    ANSWER_KINDS,
    TIMEOUT_ANSWERS,
    Asked,
    OnTimeout,
    expired_question,
    waits_for_input,
)
from fxdurable.core.crash import crash_point
from fxdurable.core.events import AttemptYielded, EventType, InputAnswered, InputRequested
from fxdurable.core.records import InputAnswer, InputRequest, SubmissionRecord, ToolTaskRecord
from fxdurable.core.states import AttemptStatus, SubmissionStatus, ToolTaskStatus
from fxdurable.core.store import Tx
from fxdurable.errors import IllegalTransitionError, InvalidAnswerError, NoPendingQuestionError

from ._base import (
    Fence,
    Named,
    Transitions,
    _owned,
    _put_attempt,
    _put_submission,
    _running_attempt,
    _submission,
    _task,
    _task_ref,
)
from ._scope import _SessionScope


class Questions(Transitions):
    def request_input(
        self,
        fence: Fence,
        submission_id: str,
        *,
        question: str,
        about: Asked,
        task_id: str | None = None,
        timeout_s: float | None = None,
        on_timeout: OnTimeout = "deny",
    ) -> SubmissionRecord:
        """The turn asks a person and waits (``needs_input``), in one transaction: the
        question is recorded on the submission (naming the call ``task_id`` it is about, which
        must still be ``pending``: no intent, so nothing can be unknown), and the attempt ends
        ``yielded``: a wait is not an interruption and spends no attempt. The caller then
        lets go of the lease; nothing runs the submission until :meth:`answer_input`.
        ``timeout_s``: the question expires that long after now (the session's timer, which
        :meth:`expire_input` honours) and is then answered ``on_timeout``."""
        if timeout_s is not None and not timeout_s > 0:
            raise InvalidAnswerError(f"a question's timeout_s is positive, not {timeout_s!r}")
        if on_timeout not in TIMEOUT_ANSWERS:
            raise InvalidAnswerError(f"on_timeout is deny, allow or fail, not {on_timeout!r}")

        def body(tx: Tx, scope: _SessionScope) -> SubmissionRecord:
            sub = _owned(fence, _submission(tx, submission_id))
            if sub.status != SubmissionStatus.RUNNING or waits_for_input(sub):
                raise IllegalTransitionError("submission", sub.status, "needs_input")
            task: ToolTaskRecord | None = None
            if about == "tool":
                task = _owned(fence, _task(tx, task_id or ""))
                self._running_turn(tx, fence, task.turn_id)
                if task.status != ToolTaskStatus.PENDING or task.answer is not None:
                    raise IllegalTransitionError("tool_task", task.status, "a question")
            last = _running_attempt(tx, submission_id)
            _put_attempt(tx, last, AttemptStatus.YIELDED, "needs input", scope.now)
            request = InputRequest(
                question=question,
                about=about,
                task_id=None if task is None else task.id,
                tool=None if task is None else task.tool,
                asked_at=scope.now,
                expires_at=None if timeout_s is None else scope.now + timeout_s,
                on_timeout=None if timeout_s is None else on_timeout,
            )
            waiting = replace(sub, input_request=request)
            _put_submission(tx, waiting)
            scope.emit(
                EventType.ATTEMPT_YIELDED,
                AttemptYielded(number=last.number, reason="needs input"),
                turn_id=submission_id,
            )
            requested = (
                InputRequested(question=question, about=about)
                if task is None
                else InputRequested(question=question, about=about, **_task_ref(task))
            )
            scope.emit(EventType.INPUT_REQUESTED, requested, turn_id=submission_id)
            return replace(waiting, version=sub.version + 1)

        waiting = self._transition(fence, body)
        asked = waiting.input_request
        crash_point("input.after-request", None if asked is None else asked.tool)
        return waiting

    def answer_input(
        self,
        session_id: str,
        kind: str,
        *,
        reason: str | None = None,
        arguments: str | None = None,
        task_id: str | None = None,
        owner: str | None = None,
    ) -> SubmissionRecord:
        """Record the answer to the question the session's next submission waits on; it is
        runnable again (the caller enqueues a wake). Needs no lease: the waiting turn holds
        none, and the session's version check orders this against any other writer.

        ``kind`` is ``allow``, ``deny`` or ``rewrite`` (``arguments``: the call's new input,
        validated by the caller against the tool; it replaces the task's arguments). An answer
        about a call is kept on its task, where the turn applies it instead of asking its hook
        again. ``allow`` of an ``exhausted`` question grants a fresh attempt budget (the
        interruptions count restarts at 0); ``deny`` of it makes the turn settle ``failed``.
        The time the question waited does not count against the turn's time budget.
        ``task_id``: the call the caller validated the answer for; if another question is
        pending now, nothing is written. Raises :class:`NoPendingQuestionError` when nothing
        waits (an answer is applied once: a repeat lands here) and
        :class:`InvalidAnswerError` for an answer that cannot apply to the question."""
        if kind not in ANSWER_KINDS:
            raise InvalidAnswerError(f"an answer is allow, deny or rewrite, not {kind!r}")
        if (kind == "rewrite") != (arguments is not None):
            raise InvalidAnswerError("a rewrite carries the call's new input, and only a rewrite")

        def body(tx: Tx, scope: _SessionScope) -> SubmissionRecord:
            unsettled = tx.unsettled_submissions(session_id)
            if not unsettled or not waits_for_input(unsettled[0]):
                raise NoPendingQuestionError(session_id)
            sub = unsettled[0]
            request = sub.input_request
            assert request is not None  # waits_for_input
            if task_id is not None and request.task_id != task_id:
                raise NoPendingQuestionError(session_id)
            answer = InputAnswer(kind=kind, reason=reason, arguments=arguments, at=scope.now)
            if request.about != "tool" and kind == "rewrite":
                raise InvalidAnswerError(
                    f"the question of session {session_id!r} is about a spent budget, not a "
                    "tool call: answer allow or deny"
                )
            return _apply_answer(tx, scope, sub, answer)

        return self._transition(Named(session_id, owner), body)

    def expire_input(self, session_id: str) -> SubmissionRecord | None:
        """The session's question timed out: record its ``on_timeout`` answer, as one
        transition raced against :meth:`answer_input` by the session's version check, so
        exactly one of them answers (the loser finds nothing waiting). ``deny`` and ``allow``
        apply as a person's would; ``fail`` is recorded as a deny the turn settles ``failed``
        on (``question_timeout``). Returns the answered submission, or None when there is
        nothing to expire (answered first, not due yet by the journal's clock, or no timer).
        Needs no lease, like an answer; the caller enqueues the wake that runs the turn."""

        def body(tx: Tx, scope: _SessionScope) -> SubmissionRecord:
            unsettled = tx.unsettled_submissions(session_id)
            if not unsettled or not expired_question(unsettled[0], scope.now):
                raise _NothingDue(session_id)
            sub = unsettled[0]
            request = sub.input_request
            assert request is not None and request.expires_at is not None
            waited = request.expires_at - request.asked_at
            kind = "allow" if request.on_timeout == "allow" else "deny"
            reason = None if kind == "allow" else f"no answer within {waited:g}s"
            answer = InputAnswer(kind=kind, reason=reason, at=scope.now, timed_out=True)
            return _apply_answer(tx, scope, sub, answer)

        try:
            expired = self._transition(Named(session_id), body)
        except _NothingDue:
            return None
        asked = expired.input_request
        crash_point("input.after-expire", None if asked is None else asked.tool)
        return expired


class _NothingDue(Exception):
    """No question of the session is due to expire: the transition writes nothing."""


def _apply_answer(
    tx: Tx, scope: _SessionScope, sub: SubmissionRecord, answer: InputAnswer
) -> SubmissionRecord:
    """Record ``answer`` to the question ``sub`` waits on: a person's (``answer_input``) or
    its expiry's (``expire_input``); the caller checked it still waits, in this transaction."""
    request = sub.input_request
    assert request is not None
    if request.about == "tool":
        task = _task(tx, request.task_id or "")
        if task.status != ToolTaskStatus.PENDING:
            raise IllegalTransitionError("tool_task", task.status, "an answer")
        tx.put_tool_task(
            replace(
                task,
                answer=answer,
                arguments=task.arguments if answer.arguments is None else answer.arguments,
                updated_at=scope.now,
                version=task.version + 1,
            ),
            expected_version=task.version,
        )
    # The time budget counts the turn's work, not a person's wait: the wait moves the
    # turn's start forward, or a long wait would fail it the moment it resumed.
    waited = max(0.0, scope.now - request.asked_at)
    started = None if sub.started_at is None else sub.started_at + waited
    answered = replace(sub, input_request=replace(request, answer=answer), started_at=started)
    if request.about == "exhausted" and answer.kind == "allow":
        answered = replace(answered, interruptions=0)
    if request.about == "budget" and answer.kind == "allow":
        # One more spending budget of the same size for this turn (runtime/spend.py).
        turn = tx.get_turn(sub.id)
        if turn is not None:
            tx.put_turn(
                replace(turn, spend_grants=turn.spend_grants + 1, version=turn.version + 1),
                expected_version=turn.version,
            )
    _put_submission(tx, answered)
    scope.emit(
        EventType.INPUT_ANSWERED,
        InputAnswered(
            answer=answer.kind,
            about=request.about,
            reason=answer.reason,
            task=request.task_id,
            tool=request.tool,
        ),
        turn_id=sub.id,
    )
    return replace(answered, version=sub.version + 1)
