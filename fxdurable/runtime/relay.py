"""Where a subagent's progress goes: up to the parent call that runs it.

A subagent call (``fx.subagent``) drives its child session's turn inline, in its own task. It
sets the relay to its own ``ctx.progress`` for as long as the child runs; the child's model
text (each streamed delta) and its tools' progress reports are passed on to it, and so land in
the parent call's ``progress`` through that call's throttled pump. A context variable carries
the relay because every task the child's run starts (its worker, its tool calls) copies the
context of the task that started it: nothing is threaded through the turn driver, and a
grandchild's text reaches the grandparent through the child call's own (relayed) report.
Outside a subagent call the relay is unset and forwarding costs one lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = ["Report", "forward", "relayed", "relaying_to"]

Report = Callable[[str], None]

_UPSTREAM: ContextVar[Report | None] = ContextVar("fxd_progress_relay", default=None)


def forward(chunk: str) -> None:
    """Pass ``chunk`` to the subagent call this code runs under, if any. Never raises."""
    upstream = _UPSTREAM.get()
    if upstream is not None and chunk:
        upstream(chunk)


def relayed(report: Report) -> Report:
    """``report``, also forwarding each chunk to the subagent call this code runs under (the
    relay is read now: a tool's thread reports without the context)."""
    upstream = _UPSTREAM.get()
    if upstream is None:
        return report

    def both(chunk: str) -> None:
        report(chunk)
        upstream(chunk)

    return both


@contextlib.contextmanager
def relaying_to(report: Report) -> Iterator[None]:
    """Forward what runs inside (and every task it starts) to ``report``."""
    token = _UPSTREAM.set(report)
    try:
        yield
    finally:
        _UPSTREAM.reset(token)
