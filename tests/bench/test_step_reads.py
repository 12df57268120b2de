"""DESIGN §8 without a clock: what a step reads, and how often it crosses into the durable core.

Timings belong in ``bench/``; this counts instead, through the real :class:`Runtime` on SQLite.
Every store read, store transaction and thread crossing the worker makes (its turn driver,
model step and wake handler) is counted; nothing is exempt, the model's history included.

- Warm: a turn in a long session reads exactly what the same turn reads in a fresh one, and
  only records newer than what the worker holds.
- Cold (a new runtime on the same store, as after a restart): the first model step reads the
  conversation once, exactly; every later step reads only what is new, and a model step after
  its round's results reads nothing (its request is built from what the commits wrote).
- A sequential tool step is one thread crossing and one commit: its result and the next
  call's intent are one commit (the model's response and its first intent are one too), and it
  reads nothing. In SQL (SQLite's trace callback): at most 8 statements, no SELECT, one
  ``COMMIT``. In a parallel batch of N whose results arrive together, a call costs 2/N
  commits: the batch's one intent commit and its one result commit.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import pydantic
import pytest

from fxdurable import Agent, Runtime, ScriptedModel, ToolContext, WorkerSettings, call, reply
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.runtime import batch, model_step, progress, tool_calls, turn, worker
from fxdurable.runtime.models.base import ModelRequest, ModelResponse
from fxdurable.runtime.models.scripted import turn_messages
from fxdurable.runtime.tools import define_tool
from fxdurable.stores.sqlite import SqliteStore

T = TypeVar("T")
P = ParamSpec("P")
SETTINGS = WorkerSettings(lease_ttl_s=60.0, heartbeat_s=30.0, scan_interval_s=30.0)


@dataclass
class Meter:
    """What the worker did: records read by kind, reads, transactions, thread crossings."""

    records: Counter[str] = field(default_factory=Counter)
    statements: Counter[str] = field(default_factory=Counter)  # SQL, by its first word
    reads: int = 0
    transactions: int = 0
    crossings: int = 0
    local: threading.local = field(default_factory=threading.local)

    def counting(self) -> bool:
        """True in a thread the worker crossed into (not the test's own polling)."""
        return getattr(self.local, "on", False)

    def clear(self) -> None:
        self.records.clear()
        self.statements.clear()
        self.reads = self.transactions = self.crossings = 0


class _CountingView:
    """Delegates to a read view and counts the records each method returns."""

    def __init__(self, inner: ReadView, meter: Meter) -> None:
        self._inner = inner
        self._meter = meter

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if isinstance(result, Sequence):
                self._meter.records[name] += len(result)
            else:
                self._meter.records[name] += result is not None
            return result

        return counted


class MeteredStore:
    """A store whose reads (records returned) and transactions are counted for the worker."""

    def __init__(self, inner: Store, meter: Meter) -> None:
        self._inner = inner
        self._meter = meter
        self.url = inner.url

    def transact(self, body: Callable[[Tx], T]) -> T:
        if self._meter.counting():
            self._meter.transactions += 1
        return self._inner.transact(body)

    def read(self, body: Callable[[ReadView], T]) -> T:
        if not self._meter.counting():
            return self._inner.read(body)
        self._meter.reads += 1
        return self._inner.read(lambda view: body(_CountingView(view, self._meter)))

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


@pytest.fixture
def meter(monkeypatch: pytest.MonkeyPatch) -> Meter:
    """Counts the worker's crossings into the durable core (``durable``) and marks their
    threads, so that only the worker's reads are counted."""
    meter = Meter()

    async def durable(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        meter.crossings += 1

        def marked() -> T:
            meter.local.on = True
            try:
                return fn(*args, **kwargs)
            finally:
                meter.local.on = False

        return await asyncio.to_thread(marked)

    for module in (turn, tool_calls, model_step, worker, batch, progress):
        monkeypatch.setattr(module, "durable", durable)
    return meter


class KeyInput(pydantic.BaseModel):
    key: str


async def _lookup(inp: KeyInput, ctx: ToolContext) -> str:
    return f"{inp.key} = 42"


async def _reporting_lookup(inp: KeyInput, ctx: ToolContext) -> str:
    """A lookup that reports progress once and waits (up to 10 s) until it is written."""
    ctx.report(f"looking up {inp.key}")
    assert ctx.records is not None
    deadline = asyncio.get_running_loop().time() + 10
    while not any(
        t.execution_id == ctx.execution_id and t.progress
        for t in ctx.records.tool_tasks(ctx.turn_id)  # on the loop: not the worker's reads
    ):
        assert asyncio.get_running_loop().time() < deadline, "the progress was never written"
        await asyncio.sleep(0.005)
    return f"{inp.key} = 42"


def _agent(calls: int, *, parallel: bool = True, progress: bool = False) -> Agent:
    """Each turn: one response asking for ``calls`` lookups, then the answer; the lookups
    run as parallel batches (at most 8 at a time) unless ``parallel`` is False; with
    ``progress``, each reports its progress once."""

    def policy(request: ModelRequest) -> ModelResponse:
        if any(m.role == "assistant" for m in turn_messages(request)):
            return reply("All are 42.")
        return reply("Looking.", *(call("lookup", key=f"k{n}") for n in range(calls)))

    execute = _reporting_lookup if progress else _lookup
    lookup = define_tool("lookup", description="Look up.", input_model=KeyInput, execute=execute)
    return Agent("reader", ScriptedModel(policy), tools=[lookup], parallel_tools=parallel)


def _store(path: Path, meter: Meter) -> MeteredStore:
    store = SqliteStore(f"sqlite:///{path}?synchronous=NORMAL")
    opened = store._open_connection

    def traced() -> sqlite3.Connection:
        """Each of the store's connections counts the SQL the worker's threads run on it."""
        conn = opened()

        def count(statement: str) -> None:
            if meter.counting():
                meter.statements[statement.split(None, 1)[0].upper()] += 1

        conn.set_trace_callback(count)
        return conn

    store._open_connection = traced  # type: ignore[method-assign]
    return MeteredStore(store, meter)


async def _turns(
    store: MeteredStore, calls: int, n: int, *, parallel: bool = True, progress: bool = False
) -> None:
    agents = [_agent(calls, parallel=parallel, progress=progress)]
    async with Runtime(agents, store=store, settings=SETTINGS, concurrency=1) as rt:
        for i in range(n):
            assert await rt.session("s").run(f"turn {i}", timeout=30) == "All are 42."


async def _measured_turn(
    store: MeteredStore, meter: Meter, calls: int, earlier: int
) -> tuple[Counter[str], int]:
    """Run ``earlier`` turns, then one counted turn, all in one warm runtime (the counts
    run until the runtime has stopped, so the worker's release is in them). Returns the
    counted records and the session's event count."""
    async with Runtime([_agent(calls)], store=store, settings=SETTINGS, concurrency=1) as rt:
        session = rt.session("s")
        for i in range(earlier):
            assert await session.run(f"turn {i}", timeout=30) == "All are 42."
        events = len(await session.events())
        meter.clear()
        assert await session.run("the measured turn", timeout=30) == "All are 42."
    return Counter(meter.records), events


def test_a_warm_turn_reads_the_same_records_in_a_long_session(tmp_path: Path, meter: Meter) -> None:
    short, short_events = asyncio.run(
        _measured_turn(_store(tmp_path / "short.db", meter), meter, calls=2, earlier=1)
    )
    long, long_events = asyncio.run(
        _measured_turn(_store(tmp_path / "long.db", meter), meter, calls=2, earlier=40)
    )
    assert short_events < 15 and long_events > 400
    assert long == short, (
        f"a turn read {dict(long)} in a {long_events}-event session but {dict(short)} in a "
        f"{short_events}-event one"
    )
    # Only what is new: the previous turn's answer and this turn's prompt. After the round's
    # results nothing is read: its response and tool tasks came back from the driver's own
    # commits (runtime/held_view.py).
    assert long["messages"] == 2, dict(long)
    assert long["tool_tasks"] == 0, dict(long)
    assert "session_tool_tasks" not in long


def test_a_cold_turn_reads_the_conversation_once_then_only_what_is_new(
    tmp_path: Path, meter: Meter
) -> None:
    path, earlier = tmp_path / "cold.db", 20
    asyncio.run(_turns(_store(path, meter), calls=2, n=earlier))
    meter.clear()
    # A new runtime on the same store: the process that held the conversation is gone.
    asyncio.run(_turns(_store(path, meter), calls=2, n=1))
    # Each earlier turn left 3 messages (prompt, two answers) and 2 tool tasks. The first
    # model step reads them all with the new prompt; the second reads nothing (the round's
    # response and tool tasks came back from the driver's own commits).
    # Nothing was compacted, so the tasks come in one read of the session's tasks.
    assert meter.records["messages"] == 3 * earlier + 1, dict(meter.records)
    assert meter.records["session_tool_tasks"] == 2 * earlier, dict(meter.records)
    assert meter.records["tool_tasks"] == 0, dict(meter.records)


def _turn_cost(
    path: Path, meter: Meter, calls: int, *, parallel: bool, progress: bool = False
) -> Counter[str]:
    asyncio.run(_turns(_store(path, meter), calls=calls, n=1, parallel=parallel, progress=progress))
    return Counter(
        crossings=meter.crossings,
        transactions=meter.transactions,
        reads=meter.reads,
        records=sum(meter.records.values()),
        statements=sum(meter.statements.values()),
        selects=meter.statements["SELECT"],
        commits=meter.statements["COMMIT"],
    )


def _per_tool_step(
    tmp_path: Path, meter: Meter, *, parallel: bool, progress: bool = False
) -> dict[str, float]:
    """What one more call in the response costs, from 6 and 16 calls (in parallel: one batch,
    then two full batches of 8)."""
    few = _turn_cost(tmp_path / "few.db", meter, calls=6, parallel=parallel, progress=progress)
    meter.clear()
    many = _turn_cost(tmp_path / "many.db", meter, calls=16, parallel=parallel, progress=progress)
    return {name: (many[name] - few[name]) / 10 for name in many}


def test_a_tool_step_is_one_crossing_one_commit_and_no_read(tmp_path: Path, meter: Meter) -> None:
    """Sequential calls of one response: each result commits with the next call's intent, so
    a step is one commit, written from the records the driver holds (no SELECT)."""
    per_step = _per_tool_step(tmp_path, meter, parallel=False)
    # Its task's INSERT (in the model response's commit), then in its step's commit: BEGIN,
    # the result's and the next intent's task UPDATEs and event INSERTs, the session's
    # version-checked UPDATE, COMMIT.
    assert per_step == {
        "statements": 8.0,
        "crossings": 1.0,
        "transactions": 1.0,
        "reads": 0.0,
        "records": 0.0,
        "selects": 0.0,
        "commits": 1.0,
    }, f"per tool step: {per_step}"


def test_a_wake_begins_its_attempt_in_the_claims_commit(tmp_path: Path, meter: Meter) -> None:
    """A wake that runs one turn of one call, everything counted: the claim reads what the
    wake decides from first (the unsettled submissions, whether it is a recovery) and begins
    the attempt in its own commit. Claiming, then reading those, then the submission and its
    turn, then beginning the attempt cost 13 crossings, 7 commits and 6 reads."""
    cost = _turn_cost(tmp_path / "wake.db", meter, calls=1, parallel=False)
    # Crossings: the session read, the claim with the attempt, the model's response with
    # the call's intent, the result, the final response, the settlement, the read that finds
    # nothing more, the release; the first model step's read of the conversation.
    # Commits: the claim with the attempt, the response with the intent, the result, the
    # final response, the settlement, the release.
    assert (cost["crossings"], cost["commits"], cost["reads"]) == (9, 6, 3), dict(cost)
    # The attempt begins from what the claim read (the submissions, their attempts, the
    # turn), not reading them again in the same transaction: 25 SELECTs if it did, 28 before
    # the claim read them.
    assert cost["selects"] == 21, dict(cost)


def test_a_tool_step_in_a_parallel_batch_is_a_share_of_one_intent_and_one_result_commit(
    tmp_path: Path, meter: Meter
) -> None:
    """A batch's intents are one commit once every hook has passed, and its results that
    arrive together are one more (runtime/batch.py ``ResultGroup``): no-op calls all finish
    in the same turn of the loop, so a batch of 8 is 2 commits. From 6 calls (one batch) to
    16 (two of 8): 10 more calls and one more batch, so 0.2 commits per call (1.1 when each
    result committed alone). The round's last result still reads the next model request in
    the same crossing: nothing read back per call."""
    per_step = _per_tool_step(tmp_path, meter, parallel=True)
    # Per call: its task's INSERT (in the model response's commit), its intent's task UPDATE
    # and event INSERT, its result's task UPDATE and event INSERT; and a tenth of two more
    # commits' BEGIN, session UPDATE and COMMIT.
    assert per_step == {
        "statements": 5.6,
        "crossings": 0.2,
        "transactions": 0.2,
        "reads": 0.0,
        "records": 0.0,
        "selects": 0.0,
        "commits": 0.2,
    }, f"per tool step in a batch: {per_step}"


def test_a_progress_report_costs_its_own_write_and_leaves_the_step_unread(
    tmp_path: Path, meter: Meter
) -> None:
    """A call that reports progress: the report's write is its own crossing and commit, and
    the task it leaves is what the call's result is written from, so the step's commit still
    reads nothing (a result written from the task as it was before the report would be
    refused as stale and run again the ordinary way: 23 statements, 9 SELECTs and 3
    transactions per step, as it was before the report handed its task back)."""
    per_step = _per_tool_step(tmp_path, meter, parallel=False, progress=True)
    # The sequential step's 8, and the report's BEGIN, session and task SELECTs (the fence
    # read and the task's run), task UPDATE and COMMIT.
    assert per_step == {
        "statements": 13.0,
        "crossings": 2.0,
        "transactions": 2.0,
        "reads": 0.0,
        "records": 0.0,
        "selects": 2.0,
        "commits": 2.0,
    }, f"per tool step with a progress report: {per_step}"


def _round_agent(rounds: int) -> Agent:
    """Each turn: ``rounds`` responses of one lookup each (a model step per tool step, as
    ``make bench`` runs them), then the answer."""

    def policy(request: ModelRequest) -> ModelResponse:
        done = sum(1 for m in turn_messages(request) if m.role == "assistant")
        if done < rounds:
            return reply("Looking.", call("lookup", key=f"k{done}"))
        return reply("All are 42.")

    lookup = define_tool("lookup", description="Look up.", input_model=KeyInput, execute=_lookup)
    return Agent("reader", ScriptedModel(policy), tools=[lookup])


def _round_cost(path: Path, meter: Meter, rounds: int) -> Counter[str]:
    async def turn() -> None:
        store = _store(path, meter)
        async with Runtime([_round_agent(rounds)], store=store, settings=SETTINGS) as rt:
            assert await rt.session("s").run("go", timeout=30) == "All are 42."

    asyncio.run(turn())
    return Counter(
        crossings=meter.crossings,
        transactions=meter.transactions,
        reads=meter.reads,
        records=sum(meter.records.values()),
        selects=meter.statements["SELECT"],
        commits=meter.statements["COMMIT"],
    )


def test_a_model_step_after_a_result_reads_nothing(tmp_path: Path, meter: Meter) -> None:
    """A round of one call: its response and first intent are one commit, its result is one
    more, and the next model request is built from what those commits wrote (the session
    row, the response's message, the round's task): no read, no SELECT. From 6 rounds to
    16: 10 more, each exactly 2 crossings and 2 commits (reading the request there was one
    more read per round: 2 records, the session and the response, in 2 SELECTs)."""
    few = _round_cost(tmp_path / "few.db", meter, rounds=6)
    meter.clear()
    many = _round_cost(tmp_path / "many.db", meter, rounds=16)
    per_round = {name: (many[name] - few[name]) / 10 for name in many}
    assert per_round == {
        "crossings": 2.0,
        "transactions": 2.0,
        "reads": 0.0,
        "records": 0.0,
        "selects": 0.0,
        "commits": 2.0,
    }, f"per round: {per_round}"


def _decision_looks(path: Path, meter: Meter, monkeypatch: pytest.MonkeyPatch, calls: int) -> int:
    """How many tasks' statuses the driver's decisions looked at in a turn of ``calls``
    sequential calls (each decision: runtime/turn_state.py and runtime/decide.py)."""
    from fxdurable.runtime import decide, turn_state

    looks = [0]
    real = decide.is_terminal

    def counted(status: Any) -> bool:
        looks[0] += 1
        return real(status)

    with monkeypatch.context() as patch:
        patch.setattr(turn_state, "is_terminal", counted, raising=False)
        patch.setattr(decide, "is_terminal", counted)
        asyncio.run(_turns(_store(path, meter), calls=calls, n=1, parallel=False))
    return looks[0]


def test_deciding_a_call_costs_the_same_at_a_long_rounds_end(
    tmp_path: Path, meter: Meter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of a round's sequential calls is decided from the first unsettled one on, in the
    loop and inside the commit that carries its intent alike: from 10 calls to 40, each more
    call adds the same 5 looks (its result and the next intent each move the settled mark,
    looking at the task they wrote and the one after it). Deciding call k from every call
    before it added about k: 27.5 a call here."""
    few = _decision_looks(tmp_path / "few.db", meter, monkeypatch, calls=10)
    many = _decision_looks(tmp_path / "many.db", meter, monkeypatch, calls=40)
    per_call = (many - few) / 30
    assert per_call == 5.0, f"{per_call} looks per call ({few} at 10 calls, {many} at 40)"
