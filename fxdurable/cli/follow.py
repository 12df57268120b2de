"""Following a session's turns on a terminal, as ``fxdurable demo`` and the coding agent
example (``examples/coding_agent/run.py``) do: arm a crash point, find the turns a crash left
unfinished, print each event as workers record it, and answer the questions turns ask.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Awaitable, Callable

from fxdurable.cli.render import Style, describe
from fxdurable.core.crash import check_crash_at
from fxdurable.core.records import SubmissionRecord
from fxdurable.runtime.answers import Question
from fxdurable.runtime.hooks import Answer
from fxdurable.runtime.runtime import Runtime, SessionHandle
from fxdurable.runtime.submission import Submission

__all__ = [
    "FOLLOW_POLL_S",
    "Answerer",
    "arm_crash",
    "event_cursor",
    "follow",
    "line_buffered_stdout",
    "submissions",
    "unfinished",
]

# How often a follower reads the session for new events. Each read is a few milliseconds of
# SQLite; at 50 ms the wait for the next read was most of the time to the first step's line
# and to the recovered run's exit.
FOLLOW_POLL_S = 0.01

# Decides a question a turn asks (a permission prompt): prompt a person, or approve.
Answerer = Callable[[Question], Awaitable[Answer]]


def arm_crash(spec: str | None) -> None:
    """Kill this process with SIGKILL at ``spec`` (``point[:tool]``), if given."""
    if spec:
        os.environ["FXD_CRASH_AT"] = check_crash_at(spec, source="--crash-at") or spec


def line_buffered_stdout() -> None:
    """Each line reaches a pipe before a crash point's SIGKILL can cut the story short."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)


async def submissions(rt: Runtime, session_id: str) -> list[SubmissionRecord]:
    """Every submission of the session, in admission order."""
    return await asyncio.to_thread(rt.journal.read, lambda v: list(v.submissions(session_id)))


def unfinished(records: list[SubmissionRecord]) -> list[Submission]:
    """The submissions among ``records`` that have not settled: a crash left them, or they
    wait for an answer; following them resumes them."""
    return [s for s in map(Submission.of, records) if not s.settled]


async def event_cursor(session: SessionHandle) -> int:
    """The cursor after the session's last event (0 before it exists)."""
    state = await session.record()
    return (state.next_event_seq - 1) if state else 0


async def follow(
    rt: Runtime,
    session: SessionHandle,
    targets: list[Submission],
    cursor: int,
    style: Style,
    *,
    answer: Answerer | None = None,
) -> list[Submission] | None:
    """Print the session's events as workers record them, until every target settles
    (or None when a SIGINT/SIGTERM stopped the runtime first: once every session in flight
    reached a step boundary, or the runtime's shutdown grace ran out). A target that waits for a
    person's answer gets ``answer``'s, once its events so far are printed; without
    ``answer`` it waits for someone else to answer (``session.answer``)."""
    ids = {t.id for t in targets}
    while True:
        # A step that runs on past the shutdown grace (a long shell command) is the runtime's
        # to cancel as it closes; waiting here for its boundary would hang the process.
        stopped = rt.stopped or rt.shutdown_grace_left_s == 0.0
        records = [await session.submission(t.id) for t in targets]
        for event in await session.events(after=cursor):
            cursor = event.seq
            line = describe(event, style)
            if line is not None:
                print(f"  {line}", flush=True)
        # Read the outcome before the events: the last events are printed before returning.
        if all(r is not None and r.settled for r in records):
            return [r for r in records if r is not None]
        if stopped:
            return None
        if answer is not None and any(r is not None and r.needs_input for r in records):
            question = await session.question()
            if question is not None and question.submission_id in ids:
                decided = await _unless_stopped(rt, answer(question))
                if decided is None:
                    return None
                await session.answer(decided)
                continue
        await asyncio.sleep(FOLLOW_POLL_S)


async def _unless_stopped(rt: Runtime, pending: Awaitable[Answer]) -> Answer | None:
    """``pending``'s answer, or None when the runtime stops first (a person at a prompt
    pressed Ctrl-C: the question stays recorded, and the next run asks it again)."""
    task = asyncio.ensure_future(pending)
    while not task.done():
        if rt.stopped:
            task.cancel()
            return None
        await asyncio.wait({task}, timeout=0.1)
    return task.result()
