"""The trace context a wake carries: a W3C ``traceparent``, without importing OpenTelemetry.

Queues put :func:`current_traceparent` in each wake message they can carry it in; the consumer
hands it to :func:`set_wake_parent` before handling the wake, and the attempt's span
(:mod:`fxdurable.runtime.tracing`) joins it. OpenTelemetry is read from ``sys.modules`` only:
an application that never imported it pays one dictionary lookup per wake.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator

__all__ = ["current_traceparent", "handling_wake", "set_wake_parent", "wake_parent"]

# The traceparent of the wake this task is handling (tasks copy it from their creator).
_wake_parent: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fxd_wake_parent", default=None
)


def set_wake_parent(trace_parent: str | None) -> None:
    """The wake about to be handled in this context carried ``trace_parent`` (or none)."""
    _wake_parent.set(trace_parent)


@contextlib.contextmanager
def handling_wake(trace_parent: str | None) -> Iterator[None]:
    """The wake's ``trace_parent`` for the code run inside, put back afterwards: a caller that
    handles a wake on its own thread (an RQ job) must not leave it to whatever that thread
    runs next, which would join an unrelated trace."""
    token = _wake_parent.set(trace_parent)
    try:
        yield
    finally:
        _wake_parent.reset(token)


def wake_parent() -> str | None:
    return _wake_parent.get()


def current_traceparent() -> str | None:
    """The ``traceparent`` to carry in a wake: the active span's, else the wake's own."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is not None:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    return _wake_parent.get()
