"""A chat stream: the session's journal events as JSON lines, each with its cursor.

The store is the only source: a stream polls it for events after its cursor (backing off
while nothing happens), so it shows the same lines whichever process runs the turn, and a
client that reconnects from its last cursor sees every later line once, without a gap.
While no event comes, a chat stream also polls the running tool call's progress (state, not
history) and sends a ``progress`` line each time it changed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fxdurable.core.records import EventRecord
from fxdurable.http.lines import Marker, Progress, line_for, marker_line, progress_line
from fxdurable.http.settings import HttpSettings

__all__ = ["ReadEvents", "ReadProgress", "RunningProgress", "long_poll", "tail"]

# A long poll answers with at most this many lines; the client polls again from the last one.
LONG_POLL_MAX_LINES = 1000

ReadEvents = Callable[[int], Awaitable[Sequence[EventRecord]]]


@dataclass(frozen=True, slots=True)
class RunningProgress:
    """The progress of the tool call in flight, as a ``progress`` line shows it."""

    turn_id: str
    at: float
    data: Progress


ReadProgress = Callable[[], Awaitable[RunningProgress | None]]


def _encode(line: dict[str, Any]) -> bytes:
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _marker(kind: Marker, session_id: str, cursor: int, **data: Any) -> bytes:
    return _encode(marker_line(kind, session_id, cursor, **data))


async def tail(
    read_events: ReadEvents,
    session_id: str,
    after: int,
    settings: HttpSettings,
    *,
    until: Callable[[EventRecord], bool] | None = None,
    idle_timeout_s: float | None = None,
    read_progress: ReadProgress | None = None,
) -> AsyncIterator[bytes]:
    """Lines for every event after ``after``; stops after the event ``until`` accepts, after
    ``idle_timeout_s`` without a new event or progress, or after ``settings.max_stream_s``.
    With ``read_progress``, each poll that finds no event reads the running call's progress
    and sends a ``progress`` line when it differs from the last one sent."""
    cursor = after
    poll = settings.poll_min_s
    started = last_event = last_line = time.monotonic()
    shown: RunningProgress | None = None
    while True:
        batch = await read_events(cursor)
        if batch:
            for event in batch:
                cursor = event.seq
                yield _encode(line_for(event))
                if until is not None and until(event):
                    return
            poll = settings.poll_min_s
            last_event = last_line = time.monotonic()
            continue
        if read_progress is not None:
            running = await read_progress()
            if running is not None and running != shown:
                shown = running
                line = progress_line(
                    session_id, cursor, turn_id=running.turn_id, at=running.at, data=running.data
                )
                yield _encode(line)
                poll = settings.poll_min_s
                last_event = last_line = time.monotonic()
                continue
        now = time.monotonic()
        if now - started >= settings.max_stream_s:
            yield _marker(Marker.STREAM_END, session_id, cursor, reason="max_duration")
            return
        if idle_timeout_s is not None and now - last_event >= idle_timeout_s:
            yield _marker(Marker.STREAM_END, session_id, cursor, reason="idle")
            return
        if now - last_line >= settings.keepalive_s:
            yield _marker(Marker.KEEPALIVE, session_id, cursor)
            last_line = now
        await asyncio.sleep(poll)
        poll = min(poll * 2, settings.poll_max_s)


async def long_poll(
    read_events: ReadEvents, session_id: str, after: int, settings: HttpSettings
) -> bytes:
    """The lines after ``after`` as one body (receipt mode: nothing streams).

    Answers as soon as there is at least one line, with every line there is then (up to
    :data:`LONG_POLL_MAX_LINES`); after ``settings.long_poll_s`` with none, answers a single
    ``stream_end`` line (``idle``) that carries the cursor to poll from again. A turn that
    settles ends the wait too, since its ``turn_end`` is a line.
    """
    poll = settings.poll_min_s
    deadline = time.monotonic() + settings.long_poll_s
    lines: list[bytes] = []
    cursor = after
    while True:
        batch = await read_events(cursor)
        for event in batch:
            cursor = event.seq
            lines.append(_encode(line_for(event)))
        if batch and len(lines) < LONG_POLL_MAX_LINES:
            continue  # a full page may have more behind it
        if lines:
            return b"".join(lines)
        left = deadline - time.monotonic()
        if left <= 0:
            return _marker(Marker.STREAM_END, session_id, cursor, reason="idle")
        await asyncio.sleep(min(poll, left))
        poll = min(poll * 2, settings.poll_max_s)
