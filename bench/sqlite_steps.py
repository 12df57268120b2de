"""The durable core on SQLite: raw commits, per-step journal cost, growth and resume reads.

Everything here drives :class:`fxdurable.core.journal.Journal` directly (no asyncio, no model,
no tool code), so the figures are the durability overhead alone: what one recorded step costs
next to one raw commit of the same database engine on the same disk.

A *model step* is ``record_model_call`` (one transaction: the response, its tool tasks, the
assistant message and the event). A *tool step* is ``start_tool`` + ``finish_tool`` (two
transactions: the intent is committed before the call runs, the result after it; DESIGN §3.4).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from bench.timing import Samples
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Fence, Journal, WorkerIdentity
from fxdurable.core.records import (
    MessageRecord,
    ModelCallRecord,
    ToolCallRequest,
    ToolTaskRecord,
    Usage,
)
from fxdurable.core.states import ToolTaskStatus
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.runtime.history import History, build_history
from fxdurable.stores.sqlite import SqliteStore

__all__ = [
    "CountingStore",
    "GrowthFigures",
    "RawCommit",
    "ResumeFigures",
    "SessionDriver",
    "StepFigures",
    "measure_growth",
    "measure_resume",
    "measure_steps",
]

T = TypeVar("T")

SYNCS = ("FULL", "NORMAL")
LEASE_TTL_S = 24 * 3600.0  # the bench holds each lease for the whole run
ROUNDS_PER_TURN = 8  # long sessions are built from turns of this many tool rounds

# Payloads of a plausible size: a sentence or two from the model, a screenful from a tool.
MODEL_TEXT = "I will look that up, then compare the two results before answering. " * 3
TOOL_ARGUMENTS = json.dumps({"path": "src/app/config.py", "pattern": "TIMEOUT"}, sort_keys=True)
TOOL_RESULT = "src/app/config.py:12: TIMEOUT = 30  # seconds\n" * 8
USAGE = Usage(input_tokens=1200, output_tokens=60)


def sqlite_url(path: Path, synchronous: str = "FULL") -> str:
    """``sqlite:///{path}`` (absolute path); FULL is the store's default, so no option."""
    url = f"sqlite:///{path.resolve()}"
    return url if synchronous == "FULL" else f"{url}?synchronous={synchronous}"


class RawCommit:
    """The baseline: one small INSERT and a COMMIT on a WAL database, like the store's own."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(f"PRAGMA synchronous={synchronous}")
        self._conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)")
        self._value = "x" * 64

    def commit(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")  # the store's writers take the lock the same way
        self._conn.execute("INSERT INTO t (v) VALUES (?)", (self._value,))
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class CountingStore:
    """A :class:`Store` wrapper counting transactions and reads: store round trips per step."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.url = inner.url
        self.transactions = 0
        self.reads = 0

    @property
    def inner(self) -> Store:
        return self._inner

    def transact(self, body: Callable[[Tx], T]) -> T:
        self.transactions += 1
        return self._inner.transact(body)

    def read(self, body: Callable[[ReadView], T]) -> T:
        self.reads += 1
        return self._inner.read(body)

    def put_blob(self, data: bytes) -> str:
        return self._inner.put_blob(data)

    def get_blob(self, digest: str) -> bytes | None:
        return self._inner.get_blob(digest)

    def delete_blob(self, digest: str) -> None:
        self._inner.delete_blob(digest)

    def blob_digests(self) -> Iterator[str]:
        return self._inner.blob_digests()

    def close(self) -> None:
        self._inner.close()


def open_journal(url: str) -> tuple[Journal, CountingStore]:
    store = CountingStore(SqliteStore(url))
    return Journal(store, SystemClock(), RandomIds()), store


class SessionDriver:
    """One session with a held lease and a running turn, advanced one journal step at a time.

    ``journal`` may be swapped for another journal on the same database file (the long sessions
    are built with ``synchronous=NORMAL`` to save time, then measured at ``FULL``).
    """

    def __init__(self, journal: Journal, session_id: str) -> None:
        self.journal = journal
        self.session_id = session_id
        self._turns = 0
        self._begin_turn()  # admission creates the session the lease belongs to
        fence = journal.claim(session_id, _worker(), ttl_s=LEASE_TTL_S)
        if fence is None:
            raise RuntimeError(f"could not claim the lease of bench session {session_id}")
        self.fence: Fence = fence
        self._start_attempt()

    def _begin_turn(self) -> None:
        self._turns += 1
        admission = self.journal.admit(
            self.session_id,
            agent="bench",
            prompt=f"Task {self._turns}: find the timeout settings and explain them.",
            request_id=f"{self.session_id}-req-{self._turns}",
        )
        self.submission_id = admission.submission.id

    def _start_attempt(self) -> None:
        start = self.journal.begin_attempt(self.fence, self.submission_id, worker="bench")
        self.turn_id = start.turn.id
        self.round = start.turn.rounds

    def model_step(self, tools: int = 1) -> list[ToolTaskRecord]:
        calls = [ToolCallRequest(name="grep", arguments=TOOL_ARGUMENTS) for _ in range(tools)]
        tasks = self.journal.record_model_call(
            self.fence,
            self.turn_id,
            round_=self.round,
            text=MODEL_TEXT,
            tool_calls=calls,
            policies=["safe"] * tools,
            usage=USAGE,
        ).tasks
        self.round += 1
        return list(tasks)

    def tool_step(self, task: ToolTaskRecord) -> None:
        self.journal.start_tool(self.fence, task.id)
        self.journal.finish_tool(self.fence, task.id, ToolTaskStatus.COMPLETED, TOOL_RESULT)

    def timed_rounds(self, rounds: int) -> tuple[float, float]:
        """Run ``rounds`` rounds (a model step asking for one tool, then that tool's step);
        return the seconds spent in model steps and in tool steps."""
        model_s = tool_s = 0.0
        for _ in range(rounds):
            t0 = time.perf_counter()
            (task,) = self.model_step()
            t1 = time.perf_counter()
            self.tool_step(task)
            t2 = time.perf_counter()
            model_s += t1 - t0
            tool_s += t2 - t1
        return model_s, tool_s

    def full_round(self) -> None:
        for task in self.model_step():
            self.tool_step(task)

    def next_turn(self) -> None:
        """Answer (a model step without tools), settle, and start the session's next turn."""
        self.model_step(tools=0)
        self.journal.settle(self.fence, self.submission_id, "completed", text=MODEL_TEXT)
        self._begin_turn()
        self._start_attempt()

    def interrupt(self) -> None:
        """Leave the turn as a crash after ``tool.after-intent`` would: a task ``running``."""
        (task,) = self.model_step()
        self.journal.start_tool(self.fence, task.id)

    def events(self) -> int:
        def count(view: ReadView) -> int:
            session = view.get_session(self.session_id)
            assert session is not None
            return session.next_event_seq - 1

        return self.journal.read(count)

    def grow(self, events: int) -> None:
        """Add turns of ``ROUNDS_PER_TURN`` rounds until the session has ``events`` events;
        a turn is left running (mid-conversation)."""
        while self.events() < events:
            for _ in range(ROUNDS_PER_TURN):
                self.full_round()
            self.next_turn()


def _worker() -> WorkerIdentity:
    return WorkerIdentity(host="bench", pid=os.getpid())


# -- per-step overhead ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepFigures:
    """Seconds per op (medians) by case name, and store transactions per step."""

    seconds: dict[str, float]
    tx_per_model_step: float
    tx_per_tool_step: float


def measure_steps(tmp: Path, *, batches: int, raw_ops: int, rounds: int) -> StepFigures:
    """Raw commits and journal steps at FULL and NORMAL, in interleaved batches.

    Cases: ``raw FULL``, ``raw NORMAL``, ``model FULL``, ``tool FULL``, ``model NORMAL``,
    ``tool NORMAL``. Both journals share ``b.db`` (one session each), as two processes would.
    """
    samples = Samples()
    raw = {sync: RawCommit(tmp / f"raw-{sync.lower()}.db", sync) for sync in SYNCS}
    journals = {sync: open_journal(sqlite_url(tmp / "b.db", sync)) for sync in SYNCS}
    drivers = {sync: SessionDriver(journals[sync][0], f"steps-{sync.lower()}") for sync in SYNCS}
    try:
        for batch in range(batches + 1):
            warm_up = batch == 0  # the first batch fills caches and is not counted
            for sync in SYNCS:
                start = time.perf_counter()
                for _ in range(raw_ops):
                    raw[sync].commit()
                if not warm_up:
                    samples.add(f"raw {sync}", time.perf_counter() - start, raw_ops)
                model_s, tool_s = drivers[sync].timed_rounds(rounds)
                if not warm_up:
                    samples.add(f"model {sync}", model_s, rounds)
                    samples.add(f"tool {sync}", tool_s, rounds)
        # Round trips per step, counted on one more (untimed) round.
        store = journals["FULL"][1]
        tx0 = store.transactions
        (task,) = drivers["FULL"].model_step()
        tx_model = store.transactions - tx0
        drivers["FULL"].tool_step(task)
        tx_tool = store.transactions - tx0 - tx_model
    finally:
        for conn in raw.values():
            conn.close()
        for _journal, store in journals.values():
            store.close()
    names = [f"{kind} {sync}" for kind in ("raw", "model", "tool") for sync in SYNCS]
    return StepFigures(
        seconds={n: samples.median(n) for n in names},
        tx_per_model_step=tx_model,
        tx_per_tool_step=tx_tool,
    )


# -- cost per step against the length of the session ----------------------------------------


@dataclass(frozen=True, slots=True)
class GrowthFigures:
    """Tool and model step cost (FULL) in a short and in a long session of one database."""

    short_events: float  # the session's length during the measured steps (median of batches)
    long_events: float
    seconds: dict[str, float]  # "tool short", "tool long", "model short", "model long"


def measure_growth(
    tmp: Path, *, events: int, batches: int, rounds: int, on_progress: Callable[[str], None]
) -> GrowthFigures:
    """Each batch: ``rounds`` rounds in a fresh short session, then in the long session.

    The long session is built first (at NORMAL, to save time) from many settled turns; its
    current turn is running, so its steps are steps of a real late-conversation turn. The short
    sessions live in the same file, so table sizes are the same for both: only the length of
    the session differs.
    """
    path = tmp / "growth.db"
    builder, build_store = open_journal(sqlite_url(path, "NORMAL"))
    long = SessionDriver(builder, "long")
    long.grow(events)
    built = long.events()
    build_store.close()
    on_progress(f"built a {built:,}-event session")

    journal, store = open_journal(sqlite_url(path))
    long.journal = journal
    try:
        return sample_growth(journal, long, batches=batches, rounds=rounds)
    finally:
        store.close()


def sample_growth(
    journal: Journal, long: SessionDriver, *, batches: int, rounds: int
) -> GrowthFigures:
    """Time model and tool steps in fresh short sessions and in ``long``, batch by batch (the
    first batch warms up), on whatever store ``journal`` writes to."""
    samples = Samples()
    lengths: dict[str, list[float]] = {"short": [], "long": []}
    for batch in range(batches + 1):
        warm_up = batch == 0
        short = SessionDriver(journal, f"short-{batch}")
        for name, driver in (("short", short), ("long", long)):
            before = driver.events()
            model_s, tool_s = driver.timed_rounds(rounds)
            if warm_up:
                continue
            samples.add(f"model {name}", model_s, rounds)
            samples.add(f"tool {name}", tool_s, rounds)
            lengths[name].append((before + driver.events()) / 2)
    return GrowthFigures(
        short_events=sorted(lengths["short"])[len(lengths["short"]) // 2],
        long_events=sorted(lengths["long"])[len(lengths["long"]) // 2],
        seconds={
            f"{kind} {name}": samples.median(f"{kind} {name}")
            for kind in ("tool", "model")
            for name in ("short", "long")
        },
    )


# -- resume reads -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResumeState:
    """What a resumed turn reads before its next action (as the turn driver's snapshot)."""

    unsettled: int
    last_call: ModelCallRecord | None
    round_tasks: list[ToolTaskRecord]


def resume_view(view: ReadView, session_id: str) -> ResumeState:
    """The session, its unsettled submissions, the turn, its last model call, that round's
    tasks: everything recovery needs to decide what to do next (DESIGN §4)."""
    session = view.get_session(session_id)
    assert session is not None
    unsettled = view.unsettled_submissions(session_id)
    sub = view.get_submission(unsettled[0].id)
    turn = view.get_turn(unsettled[0].id)
    assert sub is not None and turn is not None
    last = view.get_model_call(turn.id, turn.rounds - 1) if turn.rounds else None
    tasks = list(view.tool_tasks(turn.id, last.round)) if last is not None else []
    return ResumeState(unsettled=len(unsettled), last_call=last, round_tasks=tasks)


def _messages(view: ReadView, session_id: str) -> Sequence[MessageRecord]:
    return view.messages(session_id)


def _tool_tasks(view: ReadView, session_id: str) -> Sequence[ToolTaskRecord]:
    """The running turn's tool tasks, never the whole session's: what an attempt reads once,
    when it begins (the driver keeps them in memory from then on)."""
    unsettled = view.unsettled_submissions(session_id)
    return view.tool_tasks(unsettled[0].id) if unsettled else []


def _history(view: ReadView, session_id: str) -> History:
    """A cold history load with no compaction: every message and tool task of the session.
    A worker makes it once per session it does not hold yet (runtime/conversation.py); later
    model steps read only what is newer. It grows with the messages since the latest
    summary, which is what the model is sent."""
    return build_history(view.messages(session_id), view.session_tool_tasks(session_id))


@dataclass(frozen=True, slots=True)
class ResumeFigures:
    short_events: int
    long_events: int
    # "resume", "history" (a cold history load, once per worker and session) and "preread"
    # (the turn's tool tasks, read once when an attempt begins),
    # each for "short" and "long"
    seconds: dict[str, float]
    messages: dict[str, int]  # messages the model reads, by session
    tool_tasks: dict[str, int]  # tool tasks in the running turn


def measure_resume(
    tmp: Path,
    *,
    events: int,
    batches: int,
    reads: int,
    history_reads: int,
    on_progress: Callable[[str], None],
) -> ResumeFigures:
    """Resume reads of a crashed turn (a tool task left ``running``) in a short and a long
    session. Beside them, a cold history load (once per worker and session; it grows with
    the messages since the latest summary, DESIGN §8 allows it) and the running turn's tool
    tasks, read once per attempt (it must not grow with the session). What a step reads is
    pinned by tests/bench/test_step_reads.py, which counts records.
    """
    path = tmp / "resume.db"
    builder, build_store = open_journal(sqlite_url(path, "NORMAL"))
    long = SessionDriver(builder, "long")
    long.grow(events)
    long.interrupt()
    short = SessionDriver(builder, "short")
    short.full_round()
    short.interrupt()
    lengths = {"short": short.events(), "long": long.events()}
    build_store.close()
    on_progress(f"built a {lengths['long']:,}-event session")

    journal, store = open_journal(sqlite_url(path))
    ids = {"short": short.session_id, "long": long.session_id}
    try:
        for sid in ids.values():  # the bench reads a real crash state, not an empty one
            state = journal.read(partial(resume_view, session_id=sid))
            running = [t for t in state.round_tasks if t.status == ToolTaskStatus.RUNNING]
            if state.unsettled != 1 or len(running) != 1:
                raise RuntimeError(f"bench session {sid} is not in the expected crash state")
        messages = {
            name: len(journal.read(partial(_messages, session_id=sid))) for name, sid in ids.items()
        }
        tool_tasks = {
            name: len(journal.read(partial(_tool_tasks, session_id=sid)))
            for name, sid in ids.items()
        }
        samples = Samples()
        for batch in range(batches + 1):
            for name, sid in ids.items():
                cases = (
                    ("resume", partial(resume_view, session_id=sid), reads),
                    ("history", partial(_history, session_id=sid), history_reads),
                    ("preread", partial(_tool_tasks, session_id=sid), history_reads),
                )
                for kind, body, ops in cases:
                    start = time.perf_counter()
                    for _ in range(ops):
                        journal.read(body)
                    if batch:  # batch 0 warms the caches
                        samples.add(f"{kind} {name}", time.perf_counter() - start, ops)
    finally:
        store.close()
    return ResumeFigures(
        short_events=lengths["short"],
        long_events=lengths["long"],
        seconds={
            f"{kind} {name}": samples.median(f"{kind} {name}")
            for kind in ("resume", "history", "preread")
            for name in ids
        },
        messages=messages,
        tool_tasks=tool_tasks,
    )
