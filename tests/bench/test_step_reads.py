"""DESIGN §8 without a clock: what a step *reads* must not grow with the conversation.

Timings belong in ``bench/``; this counts records instead. Every read the runtime makes during
one turn is recorded with how many records it returned. Only the history the model is sent
(the read that fetches ``messages``) may grow with the session; every other read of a turn in
a long session must return no more records than the same read in a one-turn session.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from fxdurable import Agent, Runtime, ScriptedModel, ToolContext, WorkerSettings, call, reply
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.runtime.tools import define_tool
from fxdurable.stores.sqlite import SqliteStore

T = TypeVar("T")
SETTINGS = WorkerSettings(lease_ttl_s=60.0, heartbeat_s=30.0, scan_interval_s=30.0)


class _CountingView:
    """Delegates to a read view and counts the records each method returns."""

    def __init__(self, inner: ReadView, counts: Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if isinstance(result, Sequence):
                self._counts[name] += len(result)
            else:
                self._counts[name] += result is not None
            return result

        return counted


class RecordingStore:
    """A store whose reads are logged: one Counter of records per read body."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.url = inner.url
        self.reads: list[Counter[str]] = []

    def transact(self, body: Callable[[Tx], T]) -> T:
        return self._inner.transact(body)

    def read(self, body: Callable[[ReadView], T]) -> T:
        counts: Counter[str] = Counter()
        self.reads.append(counts)
        return self._inner.read(lambda view: body(_CountingView(view, counts)))

    def close(self) -> None:
        self._inner.close()


class KeyInput(pydantic.BaseModel):
    key: str


async def _lookup(inp: KeyInput, ctx: ToolContext) -> str:
    return f"{inp.key} = 42"


def _agent() -> Agent:
    model = ScriptedModel(
        [
            reply("First value.", call("lookup", key="alpha")),
            reply("Second value.", call("lookup", key="beta")),
            reply("Both are 42."),
        ]
    )
    lookup = define_tool("lookup", description="Look up.", input_model=KeyInput, execute=_lookup)
    return Agent("reader", model, tools=[lookup])


def _largest_step_read(reads: list[Counter[str]]) -> tuple[int, Counter[str]]:
    """The read (other than the model's history) that returned the most records."""
    step_reads = [c for c in reads if "messages" not in c]
    biggest = max(step_reads, key=lambda c: sum(c.values()))
    return sum(biggest.values()), biggest


async def _turn_reads(tmp: Path, earlier_turns: int) -> tuple[int, Counter[str]]:
    store = RecordingStore(SqliteStore(f"sqlite:///{tmp / 'reads.db'}?synchronous=NORMAL"))
    try:
        async with Runtime([_agent()], store=store, settings=SETTINGS, concurrency=1) as rt:
            session = rt.session("s")
            for n in range(earlier_turns):
                assert await session.run(f"turn {n}", timeout=30) == "Both are 42."
            store.reads.clear()
            assert await session.run("the measured turn", timeout=30) == "Both are 42."
            return _largest_step_read(store.reads)
    finally:
        store.close()


def test_step_reads_do_not_grow_with_the_session(tmp_path: Path) -> None:
    (tmp_path / "short").mkdir()
    (tmp_path / "long").mkdir()
    short, short_read = asyncio.run(_turn_reads(tmp_path / "short", earlier_turns=0))
    long, long_read = asyncio.run(_turn_reads(tmp_path / "long", earlier_turns=40))
    assert long <= short, (
        f"a step read returned {long} records in a 41-turn session ({dict(long_read)}) but "
        f"{short} in a one-turn session ({dict(short_read)})"
    )
