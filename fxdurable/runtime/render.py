"""One line per event, for people: the demo's live output, `fxdurable trace` and the HTTP
trace route (`GET /sessions/{id}/trace`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from fxdurable.core.events import SETTLED_OUTCOME, TOOL_SETTLED_EVENTS, EventType
from fxdurable.core.records import EventRecord

__all__ = ["Style", "cache_note", "clock_time", "describe"]


class Style:
    """ANSI colour only when the stream is a terminal (and NO_COLOR is unset)."""

    def __init__(self, stream: TextIO = sys.stdout) -> None:
        self.enabled = stream.isatty() and not os.environ.get("NO_COLOR")

    @classmethod
    def plain(cls) -> Style:
        """No colour whatever the terminal: text for JSON (the HTTP trace route)."""
        style = cls.__new__(cls)
        style.enabled = False
        return style

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def cyan(self, text: str) -> str:
        return self._wrap("36", text)


def cache_note(read: int, written: int) -> str:
    """`` (80 cached, 20 written to cache)``: the prompt cache's share of an input count."""
    said = [f"{read} cached"] if read else []
    if written:
        said.append(f"{written} written to cache")
    return f" ({', '.join(said)})" if said else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _short(text: object, width: int = 90) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class _Fields(dict[str, str]):
    """An event's data as short text for ``str.format_map``; a missing field reads "?"."""

    def __init__(self, data: Mapping[str, object]) -> None:
        super().__init__({key: _short(value) for key, value in data.items()})

    def __missing__(self, key: str) -> str:
        return "?"


# Steering as a person reads it: what was sent, and what became of it.
_STEERING: dict[str, tuple[Callable[[Style, str], str], str]] = {
    EventType.STEER_RECORDED: (Style.bold, "you (steering the running turn): {text}"),
    EventType.STEER_DELIVERED: (Style.dim, "steering shown to the model in round {round}"),
    EventType.STEER_DROPPED: (Style.yellow, "steering dropped with its turn ({reason})"),
    EventType.STEER_REQUEUED: (
        Style.dim,
        "steering arrived after its turn settled: queued as submission {submission}",
    ),
}


def describe(event: EventRecord, style: Style) -> str | None:
    """A compact line for ``event``; None for bookkeeping events a person need not see."""
    d = event.data
    kind = event.type
    task = f"r{d.get('round')}.t{d.get('index')}" if "round" in d and "index" in d else ""
    if kind == EventType.SESSION_CREATED:
        if d.get("forked_from") is not None:
            return style.dim(
                f"session forked from {d.get('forked_from')} after its event {d.get('after')} "
                f"({d.get('messages')} messages) for agent {d.get('agent')}"
            )
        if d.get("parent_session") is not None:
            return style.dim(
                f"subagent session for agent {d.get('agent')}, started by call "
                f"{d.get('parent_task')} of session {d.get('parent_session')}"
            )
        return style.dim(f"session created for agent {d.get('agent')}")
    if kind == EventType.SUBMISSION_ADMITTED:
        return style.dim(f"submission {d.get('submission')} admitted")
    if kind == EventType.TURN_STARTED:
        return style.bold(f"you: {_short(d.get('prompt'))}")
    if kind == EventType.ATTEMPT_STARTED:
        return style.dim(f"attempt {d.get('number')} started on {d.get('worker')}")
    if kind == EventType.ATTEMPT_INTERRUPTED:
        return style.yellow(
            f"attempt {d.get('number')} was interrupted (its process died); resuming from the "
            "last committed step"
        )
    if kind == EventType.ATTEMPT_YIELDED and d.get("reason") == "needs input":
        return style.dim(f"attempt {d.get('number')} ended: the turn waits for an answer")
    if kind == EventType.ATTEMPT_YIELDED:
        return style.dim(f"attempt {d.get('number')} yielded ({d.get('reason')}); continuing")
    if kind == EventType.INPUT_REQUESTED:
        spent = " (spending budget spent)" if d.get("about") == "budget" else " (attempts spent)"
        about = f" (about {d.get('tool')} {task})" if d.get("tool") else spent
        return style.yellow(f"asks a person{about}: {_short(d.get('question'))}")
    if kind == EventType.INPUT_ANSWERED:
        why = f": {_short(d.get('reason'))}" if d.get("reason") else ""
        return style.cyan(f"answered {d.get('answer')}{why}")
    if kind == EventType.MODEL_COMPLETED:
        tools = d.get("tools")
        tools = tools if isinstance(tools, list) else []
        calls = f" → {', '.join(str(t) for t in tools)}" if tools else ""
        cached = cache_note(
            _count(d.get("cache_read_tokens")), _count(d.get("cache_creation_tokens"))
        )
        tokens = style.dim(f"  [{d.get('input_tokens')}→{d.get('output_tokens')} tok{cached}]")
        paused = d.get("stop_reason") == "pause_turn"
        pause = style.dim(" (paused; continued next round)") if paused else ""
        text = _short(d.get("text")) or "(no text)"
        return f"model: {text}{style.cyan(calls)}{pause}{tokens}{_thinking_note(d, style)}"
    if kind == EventType.OUTPUT_REJECTED:
        why = str(d.get("message") or "").split("\n", 1)[0]
        return style.yellow(f"answer rejected ({d.get('rejections')}): {_short(why)}")
    if kind == EventType.MODEL_PARTIAL:
        return style.dim(f"model (streaming, round {d.get('round')}): {_short(d.get('text'))}")
    if kind == EventType.MODEL_INTERRUPTED:
        return style.yellow(
            f"model reply cut off in round {d.get('round')} (its process died), kept as "
            f"interrupted: {_short(d.get('text'))}"
        )
    if kind == EventType.MODEL_ERROR:
        return style.yellow(
            f"model error {d.get('errors')} in round {d.get('round')}, retrying: "
            f"{_short(d.get('message'))}"
        )
    if kind == EventType.MODEL_FALLBACK:
        dropped = d.get("dropped_parts") or 0
        note = (
            f"; {dropped} reasoning part(s) only {d.get('from_model')} can read are not sent"
            if dropped
            else ""
        )
        return style.yellow(
            f"model fallback in round {d.get('round')}: {d.get('from_model')} → "
            f"{d.get('to_model')} ({_short(d.get('reason'))}){note}"
        )
    if kind == EventType.CONTEXT_COMPACTED:
        return style.cyan(
            f"context compacted: messages up to #{d.get('upto')} summarised "
            f"({len(str(d.get('summary', '')))} chars)"
        )
    if kind == EventType.TOOL_STARTED:
        reason = d.get("reason")
        why = f", {reason}" if reason else ""
        return style.dim(
            f"tool {d.get('tool')} {task} running (run {d.get('run')}, {d.get('policy')}{why})"
        )
    if kind == EventType.TOOL_STEP:
        return style.dim(f"tool {d.get('tool')} {task} step {d.get('step')} recorded")
    if kind == EventType.TOOL_RETRYING:
        return style.yellow(
            f"tool {d.get('tool')} {task} failed ({_short(d.get('error'))}); retrying in "
            f"{float(str(d.get('delay_s') or 0)):.1f}s ({d.get('failed_runs')} failed so far)"
        )
    if kind == EventType.STATE_CHANGED:
        return style.cyan(_state_change(d))
    if kind == EventType.TOOL_COMPLETED:
        return style.green(f"tool {d.get('tool')} {task} completed: {_short(d.get('result'))}")
    if kind == EventType.TOOL_OUTCOME_UNKNOWN:
        return style.yellow(
            f"tool {d.get('tool')} {task} outcome_unknown: Outcome unknown. "
            "Operation will NOT be replayed automatically; the model is told to inspect first."
        )
    if kind in TOOL_SETTLED_EVENTS:
        status = kind.partition(".")[2]  # the task status it records
        return style.red(f"tool {d.get('tool')} {task} {status}: {_short(d.get('result'))}")
    if kind in _STEERING:
        colour, line = _STEERING[kind]
        return colour(style, line.format_map(_Fields(d)))
    if kind == EventType.ABORT_REQUESTED:
        return style.yellow(f"abort requested for {d.get('submissions')}")
    if kind == EventType.SUBMISSION_COMPLETED:
        return style.green(f"turn completed: {_short(d.get('text'))}")
    if kind == EventType.SUBMISSION_INTERRUPTED:
        unknown = d.get("unknown_calls")
        named = ", ".join(str(c) for c in unknown) if isinstance(unknown, list) else ""
        return style.yellow(
            f"interrupted {d.get('interruptions')} times, {d.get('reason')}; "
            + (f"outcome unknown for: {named}" if named else "no call left unknown")
        )
    if kind in (EventType.SUBMISSION_FAILED, EventType.SUBMISSION_ABORTED):
        error = d.get("error")
        message = error.get("message") if isinstance(error, dict) else ""
        outcome = SETTLED_OUTCOME[EventType(kind)]
        return style.red(f"turn {outcome} {message or ''}".rstrip())
    return style.dim(kind)


def _state_change(d: Mapping[str, object]) -> str:
    """Keys only: a state value may be a secret, and a trace is read on terminals."""
    written = d.get("set")
    deleted = d.get("deleted")
    parts = []
    if isinstance(written, Mapping) and written:
        parts.append("set " + ", ".join(sorted(str(k) for k in written)))
    if isinstance(deleted, list) and deleted:
        parts.append("deleted " + ", ".join(str(k) for k in deleted))
    what = "; ".join(parts) or "unchanged"
    if d.get("task") is None:
        return f"state copied from the fork's source: {what}"
    step = f" step {d.get('step')}" if d.get("step") else ""
    return f"tool {d.get('tool')}{step} state {what}"


def clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _thinking_note(d: Mapping[str, Any], style: Style) -> str:
    """The model's reasoning, collapsed to its size: never shown as the answer."""
    thought = d.get("thinking")
    size = len(thought) if isinstance(thought, str) else 0
    hidden = _count(d.get("thinking_hidden"))
    said = [f"{size} chars" if size else "", f"{hidden} hidden" if hidden else ""]
    said = [s for s in said if s]
    return style.dim(f" (thinking: {', '.join(said)})") if said else ""
