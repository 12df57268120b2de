"""Tool tasks: the intent to run a call, its recorded steps (durable tools), its progress,
and its one result. Unknown means unknown: an interrupted unsafe call is never re-run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from fxdurable.core.events import (
    EventType,
    ToolRetrying,
    ToolSettled,
    ToolStarted,
    ToolStepRecorded,
    tool_settled_event,
)
from fxdurable.core.records import AttachmentRef, StepRecord, ToolTaskRecord
from fxdurable.core.session_state import StateWrites
from fxdurable.core.states import ToolTaskStatus, advance, is_terminal
from fxdurable.core.store import Tx
from fxdurable.errors import IllegalTransitionError

from ._base import (
    Fence,
    StartNext,
    ToolStep,
    Transitions,
    _owned,
    _put_task,
    _task,
    _task_ref,
)
from ._held import Held
from ._scope import Written, _SessionScope

# What finish_tool's body made: the settled task, and the next call's if it started it.
_Finished = tuple[ToolTaskRecord, ToolTaskRecord | None]


def _finished_step(made: _Finished, written: Written) -> ToolStep:
    finished, started = made
    return ToolStep(finished, written, None if started is None else ToolStep(started, written))


# A running tool task keeps the tail of what it reported (``record_progress``): bounded, so
# a tool that streams megabytes of output costs each progress write the same small record.
MAX_PROGRESS_CHARS = 4096


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A call's result for :meth:`Tools.finish_tools`: the task, how it ended, what the model
    reads, and a completed call's ``ctx.state`` writes and images (as ``finish_tool``)."""

    task_id: str
    status: ToolTaskStatus
    result: str
    writes: StateWrites | None = None
    attachments: tuple[AttachmentRef, ...] = ()


class Tools(Transitions):
    def start_tool(
        self,
        fence: Fence,
        task_id: str,
        *,
        reason: str | None = None,
        durable: bool = False,
        held: Held | None = None,
    ) -> ToolStep:
        """Record the intent to execute (pending -> running), or a re-execution after a crash.

        ``durable``: this run is of a durable tool, which records its steps (``record_step``).
        An interrupted unsafe call may be re-executed only as a durable run of a call that was
        durable from its first run: its steps are then replayed from their records, not redone.
        ``held``: the records the caller holds, written from without a read (:mod:`._held`).
        """

        def body(tx: Tx, scope: _SessionScope) -> ToolTaskRecord:
            return self._started(tx, scope, fence, task_id, reason=reason, durable=durable)

        return self._transition(fence, body, then=ToolStep, held=held)

    def start_tools(
        self, fence: Fence, starts: Sequence[StartNext], *, held: Held | None = None
    ) -> tuple[ToolStep, ...]:
        """Record the intents of several calls of one response in one commit: a parallel
        batch's, once every hook of the batch has let its call go. In ``starts``' order."""
        if not starts:
            raise ValueError("no call to start")

        def body(tx: Tx, scope: _SessionScope) -> tuple[ToolTaskRecord, ...]:
            return tuple(
                self._started(tx, scope, fence, s.task_id, reason=None, durable=s.durable)
                for s in starts
            )

        def steps(tasks: tuple[ToolTaskRecord, ...], written: Written) -> tuple[ToolStep, ...]:
            return tuple(ToolStep(task, written) for task in tasks)

        return self._transition(fence, body, then=steps, held=held)

    def _started(
        self,
        tx: Tx,
        scope: _SessionScope,
        fence: Fence,
        task_id: str,
        *,
        reason: str | None,
        durable: bool,
    ) -> ToolTaskRecord:
        """The body of a call's intent, inside the caller's transition."""
        task = _owned(fence, _task(tx, task_id))
        self._running_turn(tx, fence, task.turn_id)
        if (
            task.status == ToolTaskStatus.RUNNING
            and task.policy == "unsafe"
            and not (durable and task.durable)
        ):
            # Unknown means unknown: an interrupted unsafe call is never re-executed,
            # unless it is durable and its steps were recorded from its first run on.
            raise IllegalTransitionError("tool_task", task.status, "re-run of an unsafe call")
        if durable and not task.durable:  # its steps are recorded from this run on
            task = replace(task, durable=True)
        if task.status == ToolTaskStatus.COMPLETED and task.policy != "safe":
            raise IllegalTransitionError(
                "tool_task", task.status, f"refresh of a {task.policy} call"
            )
        status = advance("tool_task", task.status, ToolTaskStatus.RUNNING)
        updated = _put_task(tx, task, status, runs=task.runs + 1, now=scope.now)
        scope.emit(
            EventType.TOOL_STARTED,
            ToolStarted(
                **_task_ref(task),
                policy=task.policy,
                run=updated.runs,
                execution_id=task.execution_id,
                reason=reason,
            ),
            turn_id=task.turn_id,
        )
        scope.report(task.turn_id)
        return updated

    def record_step(
        self,
        fence: Fence,
        task_id: str,
        *,
        name: str,
        value: str,
        error: str | None = None,
        writes: StateWrites | None = None,
        held: Held | None = None,
    ) -> ToolStep:
        """Record a completed step of a running durable tool call: ``value`` is its result as
        JSON text, or ``error`` the exception it raised (runtime/steps.py). Each step name is
        recorded once per call (IllegalTransitionError).
        ``writes``: the call's ``ctx.state`` writes made before the step returned, committed
        with it (the step's value and its writes are one step)."""

        def body(tx: Tx, scope: _SessionScope) -> ToolTaskRecord:
            task = _owned(fence, _task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            if task.status != ToolTaskStatus.RUNNING:
                raise IllegalTransitionError("tool_task", task.status, "a step of a call")
            if not task.durable:
                raise IllegalTransitionError("tool_task", "not durable", "a step of a call")
            if any(step.name == name for step in task.steps):
                raise IllegalTransitionError("tool_step", name, "recorded twice")
            step = StepRecord(name=name, value=value, run=task.runs, at=scope.now, error=error)
            updated = replace(
                task, steps=(*task.steps, step), updated_at=scope.now, version=task.version + 1
            )
            tx.put_tool_task(updated, expected_version=task.version)
            if writes is not None:
                scope.change_state(writes, task=task, step=name)
            scope.emit(
                EventType.TOOL_STEP,
                ToolStepRecorded(**_task_ref(task), step=name, run=task.runs),
                turn_id=task.turn_id,
            )
            scope.report(task.turn_id)
            return updated

        return self._transition(fence, body, then=ToolStep, held=held)

    def record_tool_retry(
        self,
        fence: Fence,
        task_id: str,
        *,
        failed_runs: int,
        error: str,
        delay_s: float,
        held: Held | None = None,
    ) -> ToolStep:
        """Record that a run of a running call failed with a retryable error and the call
        runs again after ``delay_s`` (runtime/tool_retry.py): an event, the task unchanged."""

        def body(tx: Tx, scope: _SessionScope) -> ToolTaskRecord:
            task = _owned(fence, _task(tx, task_id))
            self._running_turn(tx, fence, task.turn_id)
            if task.status != ToolTaskStatus.RUNNING:
                raise IllegalTransitionError("tool_task", task.status, "a retry of a call")
            scope.emit(
                EventType.TOOL_RETRYING,
                ToolRetrying(
                    **_task_ref(task), failed_runs=failed_runs, error=error, delay_s=delay_s
                ),
                turn_id=task.turn_id,
            )
            scope.report(task.turn_id)
            return task

        return self._transition(fence, body, then=ToolStep, held=held)

    def finish_tool(
        self,
        fence: Fence,
        task_id: str,
        status: ToolTaskStatus,
        result: str,
        *,
        writes: StateWrites | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
        start_next: Callable[[ToolStep], StartNext | None] | None = None,
        held: Held | None = None,
    ) -> ToolStep:
        """Settle a tool task; ``result`` is what the model will read for this call, with
        ``attachments`` (the images a completed call returned, their blobs already put).

        ``writes``: the call's ``ctx.state`` writes, committed with its result, and only with
        a ``completed`` one: a call that failed, was cancelled or is unknown never wrote
        (IllegalTransitionError otherwise). Past the state's bound this raises
        :class:`~fxdurable.errors.StateTooLargeError` and writes nothing.

        ``start_next``: asked inside the transaction, with the result as it will commit,
        whether the next call's intent joins this commit (its answer's call is then started
        here: ``ToolStep.started``). It may be asked more than once (a store re-runs a body
        on a conflict), so it must decide without side effects."""

        settling = ToolResult(task_id, status, result, writes=writes, attachments=attachments)

        def body(tx: Tx, scope: _SessionScope) -> _Finished:
            finished = self._settled(tx, scope, fence, settling)
            if start_next is None:
                return finished, None
            then = start_next(ToolStep(finished, scope.preview(finished.turn_id)))
            if then is None:
                return finished, None
            started = self._started(
                tx, scope, fence, then.task_id, reason=None, durable=then.durable
            )
            return finished, started

        return self._transition(fence, body, then=_finished_step, held=held)

    def finish_tools(
        self, fence: Fence, results: Sequence[ToolResult], *, held: Held | None = None
    ) -> tuple[ToolStep, ...]:
        """Settle several tool tasks of one turn in one commit, in ``results``' order: a
        parallel batch's results that arrived together (runtime/batch.py). Each is settled
        as :meth:`finish_tool` settles it; if any is refused (its state writes too large,
        an illegal transition), nothing is written and that one's error is raised."""
        if not results:
            raise ValueError("no result to record")

        def body(tx: Tx, scope: _SessionScope) -> tuple[ToolTaskRecord, ...]:
            return tuple(self._settled(tx, scope, fence, r) for r in results)

        def steps(tasks: tuple[ToolTaskRecord, ...], written: Written) -> tuple[ToolStep, ...]:
            return tuple(ToolStep(task, written) for task in tasks)

        return self._transition(fence, body, then=steps, held=held)

    def _settled(self, tx: Tx, scope: _SessionScope, fence: Fence, r: ToolResult) -> ToolTaskRecord:
        """The body of a call's result, inside the caller's transition."""
        task = _owned(fence, _task(tx, r.task_id))
        self._running_turn(tx, fence, task.turn_id)
        target = advance("tool_task", task.status, r.status)
        if not is_terminal(target):
            raise IllegalTransitionError("tool_task", task.status, target)
        if r.writes and target != ToolTaskStatus.COMPLETED:
            raise IllegalTransitionError("tool_task", target, "state writes of the call")
        updated = _put_task(
            tx, task, target, result=r.result, now=scope.now, attachments=r.attachments
        )
        if r.writes is not None:
            # Before the result's event: a fork after the result takes the writes too.
            scope.change_state(r.writes, task=task)
        scope.emit(
            tool_settled_event(target),
            ToolSettled(**_task_ref(task), result=r.result),
            turn_id=task.turn_id,
        )
        scope.report(task.turn_id)
        return updated

    def record_progress(self, fence: Fence, task_id: str, *, run: int, text: str) -> ToolTaskRecord:
        """Set a running tool task's ``progress`` to ``text`` (its last ``MAX_PROGRESS_CHARS``);
        the task as written (its new version: what the holder's next held write carries).

        State, not history: no event, no message, the session record untouched (the commit
        still holds only under the session version the fence was read at). Refused
        (:class:`IllegalTransitionError`) once the task is no longer in run ``run``: a late
        report never lands on a settled task or on a later run's record."""

        def body(tx: Tx, scope: _SessionScope) -> ToolTaskRecord:
            task = _owned(fence, _task(tx, task_id))
            if task.status != ToolTaskStatus.RUNNING or task.runs != run:
                raise IllegalTransitionError(
                    "tool_task", f"{task.status} (run {task.runs})", f"progress of run {run}"
                )
            written = replace(
                task,
                progress=text[-MAX_PROGRESS_CHARS:],
                progress_at=scope.now,
                version=task.version + 1,
            )
            tx.put_tool_task(written, expected_version=task.version)
            return written

        return self._transition(fence, body)
