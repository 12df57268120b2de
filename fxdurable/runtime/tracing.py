"""OpenTelemetry spans for turns, attempts, model calls and tool calls (``fxdurable[otel]``).

Nothing here imports OpenTelemetry unless the application already has (``opentelemetry.trace``
is in ``sys.modules``) or ``FXD_OTEL=1`` asks for it: without it every hook is one dictionary
lookup and a direct call, and ``import fxdurable`` loads nothing of OpenTelemetry. Spans go
to whatever tracer provider the application installed (none installed: the API's no-op).

A trace is one turn. ``fxdurable.turn`` is opened where the prompt is admitted (in the
caller's own span when it has one, e.g. an HTTP request's); its context is stored on the
submission as a W3C ``traceparent`` and also carried in the wake message where the queue can
carry it. Each worker's ``fxdurable.attempt`` is a child of that context (the wake's when it
belongs to the same trace, else the stored one), so a turn that spans workers, crashes and
continuations is one trace. Model and tool calls are children of their attempt.

Attributes carry ids, names, counts and outcomes only: never a prompt, a tool's input or
output, or an error message (which may quote either).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from fxdurable.core.tracecontext import (
    current_traceparent,
    handling_wake,
    set_wake_parent,
    wake_parent,
)
from fxdurable.errors import LeaseLostError, Suspend
from fxdurable.runtime.models.fallback import member

if TYPE_CHECKING:
    from fxdurable.core.journal import Journal
    from fxdurable.core.records import SubmissionRecord

__all__ = [
    "attempt",
    "current_traceparent",
    "handling_wake",
    "model_call",
    "model_response",
    "set_wake_parent",
    "tool_call",
    "tool_outcome",
    "tool_recovery",
    "tool_rerun",
    "turn",
]

TRACER = "fxdurable"
_FORCED = os.environ.get("FXD_OTEL") == "1"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

# The tool span open in this task, with its task id: the outcome is set on it when recorded.
_tool_span: contextvars.ContextVar[tuple[str, Any] | None] = contextvars.ContextVar(
    "fxd_tool_span", default=None
)


def _api() -> Any | None:
    """``opentelemetry.trace`` when the application uses OpenTelemetry, else None."""
    if not _FORCED and "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry import trace
    except ImportError:  # FXD_OTEL=1 without the extra: stay silent rather than fail a turn
        return None
    return trace


def _tracer(trace: Any) -> Any:
    return trace.get_tracer(TRACER)


def _failed(span: Any, trace: Any, exc: BaseException) -> None:
    """Mark the span failed by the exception's type only: its message may quote a prompt."""
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(trace.Status(trace.StatusCode.ERROR))


def _span(trace: Any, name: str, attributes: dict[str, Any], context: Any = None) -> Any:
    return _tracer(trace).start_as_current_span(
        name,
        context=context,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


# -- trace context -------------------------------------------------------------------------


def _context(trace_parent: str | None) -> Any:
    """An OpenTelemetry context whose parent is ``trace_parent`` (None when it is absent)."""
    if not trace_parent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": trace_parent})


def _trace_id(trace_parent: str | None) -> str | None:
    parts = (trace_parent or "").split("-")
    return parts[1] if len(parts) == 4 else None


def _attempt_parent(stored: str | None, wake: str | None) -> str | None:
    """The wake's context wins when it belongs to the turn's trace (a wake names a session,
    not a submission: one enqueued for the next prompt must not adopt this turn)."""
    if wake and (stored is None or _trace_id(wake) == _trace_id(stored)):
        return wake
    return stored


# -- spans -------------------------------------------------------------------------------


class TurnSpan:
    """What the admitting code needs from :func:`turn`."""

    def __init__(self, span: Any = None, trace_parent: str | None = None) -> None:
        self._span = span
        self.trace_parent = trace_parent  # store it on the submission

    def admitted(self, submission: SubmissionRecord, *, created: bool = True) -> None:
        if self._span is not None:
            self._span.set_attribute("fxdurable.session.id", submission.session_id)
            self._span.set_attribute("fxdurable.submission.id", submission.id)
            self._span.set_attribute("fxdurable.submission.created", created)


_NO_TURN = TurnSpan()


@contextlib.contextmanager
def turn(agent: str, *, remote_parent: str | None = None) -> Iterator[TurnSpan]:
    """``fxdurable.turn`` around an admission: the root of the turn's trace (a child of the
    caller's span, or of ``remote_parent``, an incoming ``traceparent`` header)."""
    trace = _api()
    if trace is None:
        yield _NO_TURN
        return
    with _span(
        trace, "fxdurable.turn", {"fxdurable.agent": agent}, _context(remote_parent)
    ) as span:
        try:
            yield TurnSpan(span, current_traceparent())
        except BaseException as exc:
            _failed(span, trace, exc)
            raise


@contextlib.asynccontextmanager
async def attempt(
    journal: Journal, submission: SubmissionRecord, agent: str
) -> AsyncIterator[None]:
    """``fxdurable.attempt`` around one worker's run of a submission; its outcome is the
    settled status, or why the run stopped (``suspended``, ``lease_lost``, ``interrupted``,
    ``error``)."""
    trace = _api()
    if trace is None:
        yield
        return
    from fxdurable.runtime.crossing import durable

    parent = _attempt_parent(getattr(submission, "trace_parent", None), wake_parent())
    attributes = {
        "fxdurable.session.id": submission.session_id,
        "fxdurable.submission.id": submission.id,
        "fxdurable.agent": agent,
        "fxdurable.attempt.number": submission.attempts + 1,
    }
    with _span(trace, "fxdurable.attempt", attributes, _context(parent)) as span:
        try:
            yield
        except Suspend:
            span.set_attribute("fxdurable.attempt.outcome", "suspended")
            raise
        except LeaseLostError:
            span.set_attribute("fxdurable.attempt.outcome", "lease_lost")
            raise
        except BaseException as exc:
            # Not an Exception: cancelled (torn down, or fenced out by the heartbeat).
            outcome = "error" if isinstance(exc, Exception) else "interrupted"
            span.set_attribute("fxdurable.attempt.outcome", outcome)
            _failed(span, trace, exc)
            raise
        if not span.is_recording():
            return  # sampled out: spend no read on it
        settled = await durable(journal.read, lambda v: v.get_submission(submission.id))
        if settled is not None:
            span.set_attribute("fxdurable.attempt.outcome", str(settled.status))


def model_call(fn: F) -> F:
    """Decorates ``ModelStep.run(turn, round_)``: one ``fxdurable.model_call`` span per call
    (a retry is a span of its own; ``fxdurable.model.retries`` counts the turn's earlier
    failures)."""

    @functools.wraps(fn)
    async def traced(step: Any, turn: Any, round_: int, *args: Any, **kwargs: Any) -> Any:
        trace = _api()
        if trace is None:
            return await fn(step, turn, round_, *args, **kwargs)
        attributes = {
            "gen_ai.operation.name": "chat",
            # The model this call goes to: a Fallback chain's member the turn is on.
            "gen_ai.request.model": member(step._agent.model, turn.model).name,
            "fxdurable.turn.id": turn.id,
            "fxdurable.model.round": round_,
            "fxdurable.model.retries": turn.model_errors,
        }
        with _span(trace, "fxdurable.model_call", attributes) as span:
            try:
                outcome = await fn(step, turn, round_, *args, **kwargs)
            except BaseException as exc:
                _failed(span, trace, exc)
                raise
            span.set_attribute("fxdurable.model.outcome", type(outcome).__name__.lower())
            if getattr(outcome, "code", None):  # Failed: its code, never its message
                span.set_attribute("fxdurable.model.error_code", outcome.code)
            return outcome

    return traced  # type: ignore[return-value]


def model_response(fn: F) -> F:
    """Decorates ``ModelStep._stream``: puts the response's tokens and stop reason on the
    model call's span (a compaction's summary request is marked as such)."""

    @functools.wraps(fn)
    async def traced(step: Any, request: Any, turn_id: str | None, *args: Any) -> Any:
        trace = _api()
        if trace is None:
            return await fn(step, request, turn_id, *args)
        response = await fn(step, request, turn_id, *args)
        span = trace.get_current_span()
        if turn_id is None:
            span.set_attribute("fxdurable.model.compaction", True)
            return response
        usage = response.usage
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        # OpenTelemetry's GenAI names (both counts are parts of input_tokens).
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_tokens)
        span.set_attribute("fxdurable.usage.reasoning_tokens", usage.reasoning_tokens)
        span.set_attribute("gen_ai.response.finish_reasons", [str(response.stop_reason)])
        span.set_attribute("fxdurable.model.truncated", bool(response.truncated))
        return response

    return traced  # type: ignore[return-value]


def _tool_call(fn: F, *, recovery: bool) -> F:
    @functools.wraps(fn)
    async def traced(driver: Any, task: Any, *args: Any, **kwargs: Any) -> Any:
        trace = _api()
        current = _tool_span.get()
        if trace is None or (current is not None and current[0] == task.id):
            return await fn(driver, task, *args, **kwargs)  # untraced, or inside its own span
        attributes = {
            "gen_ai.tool.name": task.tool,
            "fxdurable.tool.task_id": task.id,
            "fxdurable.tool.policy": task.policy,
            "fxdurable.tool.execution_id": task.execution_id,
            "fxdurable.tool.runs": task.runs,
            "fxdurable.tool.recovery": recovery,
        }
        with _span(trace, "fxdurable.tool_call", attributes) as span:
            token = _tool_span.set((task.id, span))
            try:
                return await fn(driver, task, *args, **kwargs)
            except BaseException as exc:
                _failed(span, trace, exc)
                raise
            finally:
                _tool_span.reset(token)

    return traced  # type: ignore[return-value]


def tool_call(fn: F) -> F:
    """Decorates the driver's ``_run_tool(task)``: one ``fxdurable.tool_call`` span."""
    return _tool_call(fn, recovery=False)


def tool_recovery(fn: F) -> F:
    """Decorates ``_recover_tool(task)``: the span of a task a crash left ``running``."""
    return _tool_call(fn, recovery=True)


def tool_rerun(fn: F) -> F:
    """Decorates ``_execute(task, ...)``: a span for an execution that is not already inside
    its call's span (a ``reuse=False`` read of the round a crash interrupted, run again)."""
    return _tool_call(fn, recovery=True)


def tool_outcome(fn: F) -> F:
    """Decorates the driver's ``_finish(task, status, result)``: the recorded status (e.g.
    ``outcome_unknown``) becomes the tool span's ``fxdurable.tool.outcome``."""

    @functools.wraps(fn)
    async def traced(driver: Any, task: Any, status: Any, *args: Any, **kwargs: Any) -> Any:
        current = _tool_span.get()
        if current is not None and current[0] == task.id:
            current[1].set_attribute("fxdurable.tool.outcome", str(status))
        return await fn(driver, task, status, *args, **kwargs)

    return traced  # type: ignore[return-value]
