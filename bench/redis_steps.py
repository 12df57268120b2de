"""The durable core on Redis: raw round trips beside journal steps on :class:`RedisStore`.

Like :mod:`bench.sqlite_steps`, this drives :class:`~fxdurable.core.journal.Journal` directly
(no asyncio, no model, no tool code), so the figures are the durability overhead alone. The
baseline is a raw round trip to the same server on one connection, through the same redis-py
path the store's connections use (pack the command, send it, read the reply): ``PING``, and
``SET`` of a 64-byte value (a write, which with ``appendonly yes`` also goes through the AOF
before Redis answers). The step ratios are taken to the SET.

A *model step* is ``record_model_call``; a *tool step* is ``start_tool`` + ``finish_tool`` (two
transactions). Store round trips per step are read from the store's own counter (the one
tests/stores/test_redis_store.py checks the module docstring's promises against).

``trips_per_runtime_step`` is the step a user pays for: the Redis round trips of one tool step
plus the model call after it, through the real :class:`~fxdurable.Runtime` (a Redis store and
the in-process queue), reads included. It is counted, not timed: one wake of a turn of
:data:`FEW` tool steps and one of :data:`MANY`, the difference divided by the extra steps, so
admission, claim, settle and release cancel out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.redis_server import RedisServer
from bench.sqlite_steps import CountingStore, GrowthFigures, SessionDriver, sample_growth
from bench.timing import Samples
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal

__all__ = [
    "FEW",
    "MANY",
    "RawRoundTrip",
    "RedisStepFigures",
    "measure_redis_growth",
    "measure_redis_steps",
    "measure_runtime_trips",
]

DB = 1  # the bench's journals and raw keys; RQ queues use database 0
RAW_VALUE = "x" * 64
FEW, MANY = 1, 5  # tool steps in the two turns whose round trips are compared


class RawRoundTrip:
    """The baseline: one command on one connection, sent and answered (one round trip)."""

    def __init__(self, url: str) -> None:
        import redis

        self._pool = redis.ConnectionPool.from_url(url, protocol=2)
        self._conn: Any = self._pool.get_connection()
        self._key = "bench:raw"

    def _call(self, *command: object) -> object:
        conn = self._conn
        conn.send_packed_command(conn.pack_commands([command]), check_health=False)
        return conn.read_response()

    def ping(self) -> None:
        self._call("PING")

    def set(self) -> None:
        self._call("SET", self._key, RAW_VALUE)

    def close(self) -> None:
        self._pool.release(self._conn)
        self._pool.disconnect()


def round_trips(store: CountingStore) -> int:
    """Round trips the wrapped :class:`RedisStore` has made (its private counter; tests read
    the same one). -1 when the store does not keep one."""
    return int(getattr(store.inner, "_round_trips", -1))


def open_redis_journal(url: str) -> tuple[Journal, CountingStore]:
    from fxdurable.stores.redis import RedisStore

    store = CountingStore(RedisStore(url))
    return Journal(store, SystemClock(), RandomIds()), store


def store_url(server: RedisServer, prefix: str) -> str:
    return server.store_url(DB, prefix)


# -- per-step overhead ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RedisStepFigures:
    """Seconds per op (medians) by case, ``"<ping|set|model|tool> <persistence>"``, and the
    store transactions and round trips of one step."""

    persistences: tuple[str, ...]  # "no AOF", and "AOF everysec" when measured
    seconds: dict[str, float]
    tx_per_model_step: float
    tx_per_tool_step: float
    trips_per_model_step: float
    trips_per_tool_step: float
    trips_per_runtime_step: float = -1.0  # through the Runtime: a tool step and its model call


def measure_redis_steps(
    servers: Sequence[RedisServer], *, batches: int, raw_ops: int, rounds: int
) -> RedisStepFigures:
    """Raw round trips and journal steps on each server, in interleaved batches."""
    samples = Samples()
    names = [s.persistence for s in servers]
    raw = {s.persistence: RawRoundTrip(s.url(DB)) for s in servers}
    journals = {s.persistence: open_redis_journal(store_url(s, "bench-steps")) for s in servers}
    drivers = {name: SessionDriver(journals[name][0], "steps") for name in names}
    try:
        for batch in range(batches + 1):
            warm_up = batch == 0  # the first batch fills caches and is not counted
            for name in names:
                for kind, op in (("ping", raw[name].ping), ("set", raw[name].set)):
                    start = time.perf_counter()
                    for _ in range(raw_ops):
                        op()
                    if not warm_up:
                        samples.add(f"{kind} {name}", time.perf_counter() - start, raw_ops)
                model_s, tool_s = drivers[name].timed_rounds(rounds)
                if not warm_up:
                    samples.add(f"model {name}", model_s, rounds)
                    samples.add(f"tool {name}", tool_s, rounds)
        # Transactions and round trips per step, counted on one more (untimed) round.
        store = journals[names[0]][1]
        tx0, rt0 = store.transactions, round_trips(store)
        (task,) = drivers[names[0]].model_step()
        tx1, rt1 = store.transactions, round_trips(store)
        drivers[names[0]].tool_step(task)
        tx2, rt2 = store.transactions, round_trips(store)
    finally:
        for conn in raw.values():
            conn.close()
        for _journal, store in journals.values():
            store.close()
    cases = [f"{kind} {name}" for name in names for kind in ("ping", "set", "model", "tool")]
    runtime_trips = measure_runtime_trips(store_url(servers[0], "bench-runtime-trips"))
    return RedisStepFigures(
        persistences=tuple(names),
        seconds={c: samples.median(c) for c in cases},
        tx_per_model_step=tx1 - tx0,
        tx_per_tool_step=tx2 - tx1,
        trips_per_model_step=rt1 - rt0,
        trips_per_tool_step=rt2 - rt1,
        trips_per_runtime_step=runtime_trips,
    )


# -- round trips of a runtime step ----------------------------------------------------------


async def _wake_trips(url: str, tool_steps: int) -> int:
    """Round trips of the one wake that runs a turn of ``tool_steps`` tool steps."""
    from bench.runtime_turns import ANSWER, SETTINGS, stepping_agent
    from fxdurable import Runtime
    from fxdurable.stores.redis import RedisStore

    store = RedisStore(url)
    try:
        # No consumer (concurrency=0) and timers far past the run: only the wake writes.
        async with Runtime(
            [stepping_agent(tool_steps)], store=store, settings=SETTINGS, concurrency=0
        ) as rt:
            session = rt.session(f"trips-{tool_steps}")
            sub = await session.submit("Look the keys up.")
            before = store._round_trips
            await rt.wake(session.id)
            trips = store._round_trips - before
            done = await session.submission(sub.id)
            if done is None or done.result != ANSWER:
                raise RuntimeError(f"the {tool_steps}-step bench turn did not complete: {done}")
            return trips
    finally:
        store.close()


def measure_runtime_trips(url: str) -> float:
    """Redis round trips of one tool step plus its model call through the Runtime."""
    few = asyncio.run(_wake_trips(url, FEW))
    many = asyncio.run(_wake_trips(url, MANY))
    return (many - few) / (MANY - FEW)


# -- cost per step against the length of the session ----------------------------------------


def measure_redis_growth(
    server: RedisServer,
    *,
    events: int,
    batches: int,
    rounds: int,
    on_progress: Callable[[str], None],
) -> GrowthFigures:
    """As :func:`bench.sqlite_steps.measure_growth`, on Redis: each batch runs ``rounds``
    rounds in a fresh short session, then in one long session (built first, its current turn
    running), all under one prefix, so only the length of the session differs."""
    journal, store = open_redis_journal(store_url(server, "bench-growth"))
    try:
        long = SessionDriver(journal, "long")
        long.grow(events)
        on_progress(f"built a {long.events():,}-event session on Redis")
        return sample_growth(journal, long, batches=batches, rounds=rounds)
    finally:
        store.close()
