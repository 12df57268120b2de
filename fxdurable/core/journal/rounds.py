"""A turn's model rounds: a response with the tool tasks it asked for, a failed call, the
streamed text kept before the call is recorded, and a compaction summary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from fxdurable.core.clock import execution_id, tool_task_id
from fxdurable.core.events import (
    ContextCompacted,
    EventType,
    ModelCallFailed,
    ModelCompleted,
    ModelFallback,
    ModelText,
    OutputRejected,
    SteerDelivered,
)
from fxdurable.core.records import (
    ErrorInfo,
    MessageContent,
    ModelCallRecord,
    ToolCallRequest,
    ToolTaskRecord,
    TurnRecord,
    Usage,
    usage_fields,
)
from fxdurable.core.spending import add_usage
from fxdurable.core.states import ModelCallStatus, ToolTaskStatus, advance
from fxdurable.core.store import Tx
from fxdurable.errors import IllegalTransitionError

from ._base import Fence, ModelRound, StartNext, ToolStep
from ._held import Held
from ._scope import Written, _SessionScope
from .tools import Tools
from .turns import _close_out_partial

# What ``record_model_call``'s body made: the pending tasks, the turn and the call as written,
# and the first call's task if its intent joined the commit.
_Made = tuple[tuple[tuple[ToolTaskRecord, ...], TurnRecord, ModelCallRecord], ToolTaskRecord | None]


def _model_round(made: _Made, written: Written) -> ModelRound:
    (tasks, turn, call), started = made
    return ModelRound(
        tasks, turn, call, written, None if started is None else ToolStep(started, written)
    )


class Rounds(Tools):  # a response's first intent joins its commit (Tools._started)
    def record_model_call(
        self,
        fence: Fence,
        turn_id: str,
        *,
        round_: int,
        text: str,
        tool_calls: Sequence[ToolCallRequest],
        policies: Sequence[str],
        usage: Usage,
        steering: int = 0,
        stop_reason: str | None = None,
        stop_inferred: bool = False,
        truncated: bool = False,
        model: str | None = None,
        paused: bool = False,
        content: MessageContent | None = None,
        thinking: str | None = None,
        thinking_hidden: int = 0,
        start_next: Callable[[ModelRound], StartNext | None] | None = None,
        held: Held | None = None,
    ) -> ModelRound:
        """Record a finished model response with the tool tasks it asked for, atomically.

        ``steering`` counts the pending steering entries the model was shown (the oldest
        first): they become user messages just before the response, in the same commit.
        ``stop_reason`` (verbatim), ``stop_inferred`` and ``truncated`` say how it ended;
        ``model`` names the model that answered. Its usage joins the turn's and the session's
        spending totals in the same commit.
        ``paused``: the provider paused the turn (Anthropic ``pause_turn``); the model is
        called again with this response as its turn so far, and the answer that ends the run
        of pauses starts with their text (``TurnRecord.paused_text``). ``content``: the
        provider's own content of a response without tool calls, kept on its message.
        ``thinking`` / ``thinking_hidden``: what the event shows of its reasoning (the parts
        themselves are in ``tool_calls`` and ``content``).
        ``start_next``: asked inside the transaction, with the round as it will commit,
        whether its first call's intent joins this commit (``ModelRound.started``); it may be
        asked more than once, so it decides without side effects. ``held``: the records the
        caller holds, written from without a read (:mod:`._held`).
        """
        if len(policies) != len(tool_calls):
            raise ValueError("one replay policy per tool call")

        def body(tx: Tx, scope: _SessionScope) -> _Made:
            turn = self._running_turn(tx, fence, turn_id)
            if round_ != turn.rounds:
                raise IllegalTransitionError(
                    "model_call", f"round {turn.rounds}", f"round {round_}"
                )
            pending = scope.session.steering
            if not 0 <= steering <= len(pending):
                raise IllegalTransitionError("steering", f"{len(pending)} pending", steering)
            if steering:
                for text_ in pending[:steering]:
                    scope.append_message(turn_id, "user", text_)
                scope.session = replace(scope.session, steering=pending[steering:])
                scope.emit(
                    EventType.STEER_DELIVERED,
                    SteerDelivered(round=round_, count=steering),
                    turn_id=turn_id,
                )
            calls = tuple(tool_calls)
            recorded = ModelCallRecord(
                turn_id=turn_id,
                round=round_,
                status=advance("model_call", None, ModelCallStatus.COMPLETED),
                text=text,
                tool_calls=calls,
                usage=usage,
                stop_reason=stop_reason,
                stop_inferred=stop_inferred,
                truncated=truncated,
                model=model,
                created_at=scope.now,
            )
            tx.insert_model_call(recorded)
            tasks = []
            for index, (call, policy) in enumerate(zip(calls, policies, strict=True)):
                task_id = tool_task_id(turn_id, round_, index)
                task = ToolTaskRecord(
                    id=task_id,
                    session_id=turn.session_id,
                    turn_id=turn_id,
                    round=round_,
                    index=index,
                    tool=call.name,
                    arguments=call.arguments,
                    provider_id=call.provider_id,
                    policy=policy,
                    status=advance("tool_task", None, ToolTaskStatus.PENDING),
                    execution_id=execution_id(task_id),
                    updated_at=scope.now,
                )
                tx.put_tool_task(task, expected_version=None)
                tasks.append(task)
            # The text of the unbroken run of pauses before this call (and this one's, if it
            # paused too): what a continued answer starts with.
            run_text = turn.paused_text if turn.pauses_in_row else ""
            updated = replace(
                _spent(scope, turn, usage),
                rounds=turn.rounds + 1,
                partial_text="",
                pauses_in_row=turn.pauses_in_row + 1 if paused else 0,
                paused_text=run_text + text if paused else run_text,
                version=turn.version + 1,
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.append_message(
                turn_id,
                "assistant",
                text,
                round_=round_,
                tool_calls=calls,
                content=None if calls else content,
            )
            scope.emit(
                EventType.MODEL_COMPLETED,
                ModelCompleted(
                    round=round_,
                    text=text,
                    tools=tuple(c.name for c in calls),
                    **usage_fields(usage),
                    stop_reason=stop_reason,
                    stop_inferred=stop_inferred,
                    truncated=truncated,
                    model=model,
                    thinking=thinking,
                    thinking_hidden=thinking_hidden or None,
                ),
                turn_id=turn_id,
            )
            scope.report(turn_id)
            made = tuple(tasks), updated, recorded
            if start_next is None:
                return made, None
            then = start_next(_model_round((made, None), scope.preview(turn_id)))
            if then is None:
                return made, None
            started = self._started(
                tx, scope, fence, then.task_id, reason=None, durable=then.durable
            )
            return made, started

        return self._transition(fence, body, then=_model_round, held=held)

    def reject_output(self, fence: Fence, turn_id: str, *, round_: int, message: str) -> TurnRecord:
        """A typed final answer (round ``round_``, the latest recorded call) did not validate:
        ``message`` becomes a user message of the turn, and the model is called again. The
        count is durable: crashes do not reset the turn's ``output_retries`` budget."""

        def body(tx: Tx, scope: _SessionScope) -> TurnRecord:
            turn = self._running_turn(tx, fence, turn_id)
            if round_ != turn.rounds - 1 or turn.rejected_round == round_:
                raise IllegalTransitionError(
                    "output", f"latest round {turn.rounds - 1}", f"reject round {round_}"
                )
            updated = replace(
                turn,
                output_rejections=turn.output_rejections + 1,
                rejected_round=round_,
                version=turn.version + 1,
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.append_message(turn_id, "user", message)
            scope.emit(
                EventType.OUTPUT_REJECTED,
                OutputRejected(round=round_, message=message, rejections=updated.output_rejections),
                turn_id=turn_id,
            )
            return updated

        return self._transition(fence, body)

    def record_model_error(
        self,
        fence: Fence,
        turn_id: str,
        *,
        round_: int,
        error: ErrorInfo,
        backoff_s: Callable[[int], float] | None = None,
    ) -> TurnRecord:
        """Count a transient model failure against the turn's error budget (a retry follows).

        ``backoff_s(failures)`` is how long to wait before that retry, given the turn's count
        of failures including this one; the record keeps when the wait ends
        (``model_retry_at``), so a later invocation or another worker waits out the rest of it
        instead of calling the model again at once.
        """

        def body(tx: Tx, scope: _SessionScope) -> TurnRecord:
            turn = self._running_turn(tx, fence, turn_id)
            # The failed stream's text is no answer: the retry streams the round afresh.
            failures = turn.model_errors + 1
            retry_at = scope.now + backoff_s(failures) if backoff_s is not None else None
            updated = replace(
                turn,
                model_errors=failures,
                model_retry_at=retry_at,
                partial_text="",
                version=turn.version + 1,
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.emit(
                EventType.MODEL_ERROR,
                ModelCallFailed(
                    round=round_,
                    code=error.code,
                    message=error.message,
                    errors=updated.model_errors,
                ),
                turn_id=turn_id,
            )
            return updated

        return self._transition(fence, body)

    def record_partial(self, fence: Fence, turn_id: str, *, round_: int, text: str) -> None:
        """Keep streamed text durable before the call is recorded: if the process dies, the
        event log shows what the model had said, and the recovered turn closes it out as an
        interrupted entry the model continues from (``text`` is the stream's next piece)."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            turn = self._running_turn(tx, fence, turn_id)
            if round_ != turn.rounds:
                raise IllegalTransitionError(
                    "model_call", f"round {turn.rounds}", f"round {round_}"
                )
            tx.put_turn(
                replace(turn, partial_text=turn.partial_text + text, version=turn.version + 1),
                expected_version=turn.version,
            )
            scope.emit(EventType.MODEL_PARTIAL, ModelText(round=round_, text=text), turn_id=turn_id)

        self._transition(fence, body)

    def interrupt_stream(self, fence: Fence, turn_id: str, *, round_: int, text: str) -> None:
        """A streaming reply cut short by a steer or an abort (runtime/interrupts.py): its
        unwritten ``text`` joins the partial, and the partial becomes an interrupted
        assistant entry of the round (``model.interrupted``), exactly as recovery closes out
        the stream of a dead attempt. The round stays open: the next call answers it."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            turn = self._running_turn(tx, fence, turn_id)
            if round_ != turn.rounds:
                raise IllegalTransitionError(
                    "model_call", f"round {turn.rounds}", f"round {round_}"
                )
            if text:
                scope.emit(
                    EventType.MODEL_PARTIAL, ModelText(round=round_, text=text), turn_id=turn_id
                )
                turn = replace(turn, partial_text=turn.partial_text + text)
            if turn.partial_text:
                _close_out_partial(tx, scope, turn)

        self._transition(fence, body)

    def record_compaction(
        self,
        fence: Fence,
        turn_id: str,
        *,
        summary: str,
        upto_seq: int,
        model: str,
        usage: Usage,
    ) -> None:
        """Append a summary that stands for every message up to ``upto_seq``; the summary
        call's usage is recorded with it (it is a model call too)."""

        def body(tx: Tx, scope: _SessionScope) -> None:
            turn = self._running_turn(tx, fence, turn_id)
            tx.put_turn(
                replace(_spent(scope, turn, usage), version=turn.version + 1),
                expected_version=turn.version,
            )
            if upto_seq >= scope.session.next_message_seq:
                raise IllegalTransitionError("message", f"seq {upto_seq}", "summary of the future")
            scope.append_message(turn_id, "summary", summary, summarizes_upto=upto_seq)
            scope.session = replace(
                scope.session, compacted_upto=max(scope.session.compacted_upto, upto_seq)
            )
            scope.emit(
                EventType.CONTEXT_COMPACTED,
                ContextCompacted(
                    upto=upto_seq,
                    summary=summary,
                    model=model,
                    **usage_fields(usage),
                ),
                turn_id=turn_id,
            )

        self._transition(fence, body)

    def record_model_switch(
        self,
        fence: Fence,
        turn_id: str,
        *,
        round_: int,
        from_model: str,
        to_model: str,
        reason: str,
        dropped_parts: int = 0,
    ) -> TurnRecord:
        """The turn goes on with the next model of its Fallback chain: recorded on the turn
        (a recovery continues on it) with a ``model.fallback`` event. The new model starts
        with a fresh transient-error budget and no backoff to wait out."""

        def body(tx: Tx, scope: _SessionScope) -> TurnRecord:
            turn = self._running_turn(tx, fence, turn_id)
            updated = replace(
                turn,
                model=to_model,
                model_errors=0,
                model_retry_at=None,
                partial_text="",
                version=turn.version + 1,
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.emit(
                EventType.MODEL_FALLBACK,
                ModelFallback(
                    round=round_,
                    from_model=from_model,
                    to_model=to_model,
                    reason=reason,
                    dropped_parts=dropped_parts,
                ),
                turn_id=turn_id,
            )
            return updated

        return self._transition(fence, body)


def _spent(scope: _SessionScope, turn: TurnRecord, usage: Usage) -> TurnRecord:
    """Add a model call's usage to the session's and the turn's spending totals."""
    session_spent = add_usage(scope.session.spent, usage)
    scope.session = replace(scope.session, spent=session_spent)
    return replace(turn, spent=add_usage(turn.spent, usage), session_spent=session_spent)
