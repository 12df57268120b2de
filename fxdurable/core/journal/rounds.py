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
    ModelText,
    SteerDelivered,
)
from fxdurable.core.records import (
    ErrorInfo,
    ModelCallRecord,
    ToolCallRequest,
    ToolTaskRecord,
    TurnRecord,
    Usage,
    usage_fields,
)
from fxdurable.core.states import ModelCallStatus, ToolTaskStatus, advance
from fxdurable.core.store import Tx
from fxdurable.errors import IllegalTransitionError

from ._base import Fence, ModelRound, Transitions
from ._scope import Written, _SessionScope

# What ``record_model_call``'s body made: the pending tasks, the turn and the call as written.
_Made = tuple[tuple[ToolTaskRecord, ...], TurnRecord, ModelCallRecord]


def _model_round(made: _Made, written: Written) -> ModelRound:
    tasks, turn, call = made
    return ModelRound(tasks, turn, call, written)


class Rounds(Transitions):
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
    ) -> ModelRound:
        """Record a finished model response with the tool tasks it asked for, atomically.

        ``steering`` counts the pending steering entries the model was shown (the oldest
        first): they become user messages just before the response, in the same commit.
        ``stop_reason`` (verbatim), ``stop_inferred`` and ``truncated`` say how it ended.
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
            updated = replace(
                turn, rounds=turn.rounds + 1, partial_text="", version=turn.version + 1
            )
            tx.put_turn(updated, expected_version=turn.version)
            scope.append_message(turn_id, "assistant", text, round_=round_, tool_calls=calls)
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
                ),
                turn_id=turn_id,
            )
            scope.report(turn_id)
            return tuple(tasks), updated, recorded

        return self._transition(fence, body, then=_model_round)

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
            self._running_turn(tx, fence, turn_id)
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
