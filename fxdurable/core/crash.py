"""Named crash points: ``FXD_CRASH_AT=<point>[:<tool>]`` kills the process there with SIGKILL.

No cleanup runs and nothing is flushed except the one line announcing the crash, which is
written straight to file descriptor 2: a power cut with a last word, so tests can tell an
injected crash from a bug.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection

from fxdurable.errors import ConfigurationError

__all__ = ["CRASH_POINTS", "check_crash_at", "check_crash_tool", "crash_point"]

CRASH_POINTS: frozenset[str] = frozenset(
    {
        "submission.after-admit",
        "model.before-request",
        "model.mid-stream",
        "model.after-finish",
        # A paused response (Anthropic ``pause_turn``) is recorded; its continuation, the
        # next round, has not been asked for.
        "model.after-pause",
        # A typed final answer's rejection (the note the model reads) is committed; the model
        # has not been asked again.
        "output.after-reject",
        # A call's intent is committed; it has not started. The commit may be shared: a model
        # response's with its first call's intent, a result's with the next call's, or a
        # parallel batch's intents (every call of that one commit fires it).
        "tool.after-intent",
        "tool.after-execute",
        # A call's result is committed. Where the next call's intent joined that commit, this
        # is the same state as the next call's tool.after-intent (fired right after).
        "tool.after-record",
        # A parallel batch: the last of its calls has recorded its intent (or settled without
        # running); the calls are executing, and none need have recorded its result.
        "tool.batch.running",
        # A running tool's first progress report is committed; the call has not finished.
        "tool.after-progress",
        # A durable tool's step (ctx.step): its function returned, its record not committed
        # (a crash *inside* the step); and its record committed (a crash *between* steps).
        "tool.step.before-record",
        "tool.step.after-record",
        "turn.in-commit",
        "continuation.before-enqueue",
        "continuation.after-enqueue",
        "recovery.after-claim",
        "hook.before-tool",
        # A question (before_tool's ask, on_exhausted="ask") is committed and the attempt
        # ended with it; the process has not let go of the session's lease yet.
        "input.after-request",
        # A question's expiry (``ask(timeout_s=)``) is committed; the wake that runs the
        # turn on is not enqueued yet (the scan finds the answered turn).
        "input.after-expire",
        # Inside a subagent's child run inline by its parent's call: a tool result of the
        # child is durable (``:<tool>`` names the child's tool), its next step not started.
        "subagent.in-child",
        "steer.after-record",
        # A settlement webhook's receiver answered; the delivery is not recorded yet (the
        # next worker to hold the session sends it again, with the same delivery id).
        "webhook.after-send",
        "abort.after-intent",
        # Session.fork: inside its one transaction (nothing written), and just after it.
        "fork.before-commit",
        "fork.after-commit",
        # The DynamoDB store: large records are in S3, the transaction naming them not sent.
        "store.after-offload",
        # The DynamoDB store: a transaction past 100 items (a long session's fork) has staged
        # some of its records in the new partitions, and not made them visible yet.
        "store.mid-stage",
        # An erase (core/journal/erase.py): its marker committed, nothing deleted yet; and a
        # batch of its records deleted, the rest (and the session record) still there.
        "erase.after-marker",
        "erase.after-batch",
        # The lease holder read an abort the notifier woke it for, and has not cancelled the
        # running call yet (runtime/interrupts.py).
        "abort.before-cancel",
        # A streaming reply cut by a steer or an abort is recorded interrupted; the next
        # call (or the abort's settle) is not made yet.
        "model.after-cut",
    }
)


def check_crash_at(spec: str | None = None, *, source: str = "FXD_CRASH_AT") -> str | None:
    """Refuse a crash spec (``spec``, else ``$FXD_CRASH_AT``) that names no crash point, with
    the list of valid ones: every entry point calls this at process start, so a typo fails
    there, before anything is admitted, instead of in a job later. Returns the spec."""
    if spec is None:
        spec = os.environ.get("FXD_CRASH_AT", "").strip() or None
    if spec is None:
        return None
    point = spec.partition(":")[0]
    if point not in CRASH_POINTS:
        raise ConfigurationError(
            f"{source} names no crash point {point!r}; valid points: "
            + ", ".join(sorted(CRASH_POINTS))
        )
    return spec


def check_crash_tool(spec: str | None, tools: Collection[str], *, source: str) -> None:
    """Refuse ``point:TOOL`` when no tool of the agent is called TOOL (``--crash-at
    tool.after-execute:deply`` would never fire), listing the tools."""
    if spec is None:
        return
    tool = spec.partition(":")[2]
    if tool and tool not in tools:
        raise ConfigurationError(
            f"{source} {spec!r}: no tool of the agent is called {tool!r}; its tools: "
            + ", ".join(sorted(tools))
        )


def _target() -> tuple[str, str | None] | None:
    spec = os.environ.get("FXD_CRASH_AT", "").strip()
    if not spec:
        return None
    point, _, tool = spec.partition(":")
    if point not in CRASH_POINTS:
        # A typo must not make a crash test silently run to completion.
        raise ValueError(
            f"FXD_CRASH_AT names unknown crash point {point!r}; known: "
            + ", ".join(sorted(CRASH_POINTS))
        )
    return point, tool or None


def crash_point(point: str, tool: str | None = None) -> None:
    """SIGKILL this process if ``FXD_CRASH_AT`` names ``point`` (and ``tool``, when given)."""
    if point not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {point!r}")
    target = _target()
    if target is None or target[0] != point:
        return
    if target[1] is not None and target[1] != tool:
        return
    os.write(2, f"crash injected at {point}{':' + tool if tool else ''}\n".encode())
    os.kill(os.getpid(), signal.SIGKILL)
