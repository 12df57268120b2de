"""Helpers shared by the runtime tests (imported as a plain module; tests/runtime is on sys.path).

Async tests run through :func:`run`, which wraps ``asyncio.run`` with a timeout (pytest-asyncio
is not installed). A crash is simulated by driving the journal directly as a worker in a dead
process would have, then starting a fresh :class:`fxdurable.Runtime` on the same database.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import fxdurable as fx
from fxdurable.core.clock import Clock, RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import (
    AttachmentRef,
    EventRecord,
    SubmissionRecord,
    ToolCallRequest,
    ToolTaskRecord,
    Usage,
)
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.store import ReadView
from fxdurable.runtime.models.base import ChatMessage, ModelRequest
from fxdurable.runtime.models.scripted import turn_messages
from fxdurable.stores.sqlite import SqliteStore

T = TypeVar("T")

# Fast timings: the heartbeat notices an abort within ~50 ms; the scan runs 5 times a second.
FAST = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=0.2)
# Same, but no periodic scan within a test's lifetime (to prove a path does not rely on it).
NO_SCAN = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=2, scan_interval_s=600)

TERMINAL_EVENTS = ("submission.completed", "submission.failed", "submission.aborted")

# How long a Meter holds a call waiting for company that never comes (a failing test only).
HOLD_S = 2.0


class Meter:
    """Counts the calls in flight. A call is held until ``together`` calls have been in flight
    at once, then leaves after ``finish_after[name]`` extra seconds (to force an order)."""

    def __init__(self, together: int, finish_after: dict[str, float] | None = None) -> None:
        self.together = together
        self.finish_after = finish_after or {}
        self.now = 0
        self.peak = 0
        self.entered: list[str] = []
        self.left: list[str] = []

    async def visit(self, name: str) -> str:
        self.entered.append(name)
        self.now += 1
        self.peak = max(self.peak, self.now)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + HOLD_S
        while self.peak < self.together and loop.time() < give_up:
            await asyncio.sleep(0.002)
        await asyncio.sleep(self.finish_after.get(name, 0.0))
        self.now -= 1
        self.left.append(name)
        return f"{name} ok"


_stores: list[SqliteStore] = []


def run(coro: Awaitable[T], timeout: float = 20.0) -> T:
    """Run a coroutine to completion in a fresh event loop, failing after ``timeout``.

    Stores opened with :func:`owned_store` are closed here, after ``asyncio.run`` has joined the
    default executor: a journal call cancelled on the loop side keeps running in its thread,
    and closing its SQLite connection under it crashes the interpreter (see
    test_runtime_close.py). Runtimes given a store object do not close it themselves.
    """

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    try:
        return asyncio.run(bounded())
    finally:
        while _stores:
            _stores.pop().close()


def db_url(tmp_path: Any, name: str = "fx.db") -> str:
    # tmp_path is absolute, so this is sqlite:////abs/path.db
    return f"sqlite:///{tmp_path}/{name}?synchronous=NORMAL"


def owned_store(url: str) -> SqliteStore:
    """A store for a Runtime, closed by :func:`run` once every thread is done with it."""
    opened = SqliteStore(url)
    _stores.append(opened)
    return opened


def fresh_store(tmp_path: Any, name: str = "fx.db") -> SqliteStore:
    return owned_store(db_url(tmp_path, name))


def dead_pid() -> int:
    """The pid of a process of this host that has certainly exited. On Linux, pid_max: the
    kernel hands out pids below it, so none runs there (and starting no process keeps these
    tests in the fast tier, tests/tiers.py); elsewhere, a child that ran and was reaped."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except OSError:
        proc = subprocess.Popen(["true"])
        proc.wait()
        return proc.pid


# -- reading the store ---------------------------------------------------------------------------


def read(rt: fx.Runtime, body: Callable[[ReadView], T]) -> T:
    return rt.journal.read(body)


def events(rt: fx.Runtime, session_id: str) -> list[EventRecord]:
    return list(read(rt, lambda v: v.events(session_id)))


def event_types(rt: fx.Runtime, session_id: str) -> list[str]:
    return [e.type for e in events(rt, session_id)]


def submission(rt: fx.Runtime, submission_id: str) -> SubmissionRecord:
    sub = read(rt, lambda v: v.get_submission(submission_id))
    assert sub is not None
    return sub


def tasks(rt: fx.Runtime, turn_id: str) -> list[ToolTaskRecord]:
    return list(read(rt, lambda v: v.tool_tasks(turn_id)))


def assert_gap_free(rt: fx.Runtime, session_id: str) -> list[EventRecord]:
    evs = events(rt, session_id)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    session = read(rt, lambda v: v.get_session(session_id))
    assert session is not None
    assert session.next_event_seq == len(evs) + 1
    return evs


async def at_rest(rt: fx.Runtime, session_id: str, timeout: float = 3.0) -> None:
    """Wait until the session's worker has let go (a submission settles before the release)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        session = read(rt, lambda v: v.get_session(session_id))
        if session is not None and session.lease.owner is None:
            return
        assert loop.time() < deadline, f"session {session_id} never came to rest: {session}"
        await asyncio.sleep(0.01)


async def check_invariants(rt: fx.Runtime, session_id: str) -> None:
    """The crash suite's invariants (DESIGN §5), for one session, at rest."""
    await at_rest(rt, session_id)
    evs = assert_gap_free(rt, session_id)
    subs = read(rt, lambda v: v.submissions(session_id))
    terminal = Counter(e.data.get("submission") for e in evs if e.type in TERMINAL_EVENTS)
    for sub in subs:
        assert sub.status.value in ("completed", "failed", "aborted"), sub
        assert terminal[sub.id] == 1, f"{sub.id} settled {terminal[sub.id]} times"
        for task in tasks(rt, sub.id):
            assert task.status != ToolTaskStatus.RUNNING, task
            assert task.status != ToolTaskStatus.PENDING or sub.status.value != "completed"
            if task.status == ToolTaskStatus.OUTCOME_UNKNOWN:
                assert any(
                    e.type == "tool.outcome_unknown" and e.data.get("task") == task.id for e in evs
                ), f"no tool.outcome_unknown event for {task.id}"
    session = read(rt, lambda v: v.get_session(session_id))
    assert session is not None
    assert session.status.value == "idle"
    assert session.lease.owner is None


# -- scripted models -----------------------------------------------------------------------------


def tool_messages(request: ModelRequest) -> list[ChatMessage]:
    return [m for m in turn_messages(request) if m.role == "tool"]


def last_user_text(request: ModelRequest) -> str:
    return next(m.text for m in reversed(request.messages) if m.role == "user")


def rounds_done(request: ModelRequest) -> int:
    """How many model calls this turn has already recorded (assistant messages in the turn)."""
    return sum(1 for m in turn_messages(request) if m.role == "assistant")


# -- simulated crashes ---------------------------------------------------------------------------


@dataclass
class Crashed:
    session_id: str
    submission: SubmissionRecord
    tasks: list[ToolTaskRecord]  # as left by the dead worker, by index
    dead_pid: int

    @property
    def turn_id(self) -> str:
        return self.submission.id


def leave_crashed_turn(
    url: str,
    *,
    agent: str,
    session_id: str = "s1",
    prompt: str = "ship it",
    calls: Sequence[ToolCallRequest] = (),
    policies: Sequence[str] = (),
    completed: dict[int, str] | None = None,
    running: Sequence[int] = (),
    record_model: bool = True,
    begin: bool = True,
    lease_ttl_s: float = 60.0,
    clock: Clock | None = None,
    after: Callable[[Journal, Fence], None] | None = None,
    attachments: tuple[AttachmentRef, ...] = (),
) -> Crashed:
    """Do what a worker does up to a SIGKILL, then vanish without releasing anything.

    The worker (a pid that no longer exists on this host) admits ``prompt``, claims the
    session, begins an attempt, records model round 0 asking for ``calls`` and, for each index
    in ``completed``, runs and records that call; each index in ``running`` has its intent
    committed (``tool.after-intent``) and is left ``running``.
    """
    store = SqliteStore(url)
    try:
        journal = Journal(store, clock or SystemClock(), RandomIds())
        pid = dead_pid()
        admission = journal.admit(session_id, agent=agent, prompt=prompt, attachments=attachments)
        sub = admission.submission
        fence = journal.claim(
            session_id, WorkerIdentity(host=socket.gethostname(), pid=pid), ttl_s=lease_ttl_s
        )
        assert fence is not None
        left: list[ToolTaskRecord] = []
        if begin:
            journal.begin_attempt(fence, sub.id, worker=f"{socket.gethostname()}:{pid}")
        if begin and record_model:
            left = list(
                journal.record_model_call(
                    fence,
                    sub.id,
                    round_=0,
                    text="on it",
                    tool_calls=list(calls),
                    policies=list(policies),
                    usage=Usage(),
                ).tasks
            )
            for index, result in (completed or {}).items():
                journal.start_tool(fence, left[index].id)
                left[index] = journal.finish_tool(
                    fence, left[index].id, ToolTaskStatus.COMPLETED, result
                ).task
            for index in running:
                left[index] = journal.start_tool(fence, left[index].id).task
        if after is not None:
            after(journal, fence)
        sub_now = journal.read(lambda v: v.get_submission(sub.id))
        assert sub_now is not None
        return Crashed(session_id, sub_now, left, pid)
    finally:
        store.close()
