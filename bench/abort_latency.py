"""Abort-to-cancelled latency per store (docs/aborting.md), target p99 <= 500 ms.

Each sample: a turn's tool call waits forever (an async tool on an event nobody sets); the
session is aborted; the latency runs from the abort call (its commit included) to the tool
observing its cancellation. The heartbeat is 30 s, so only the interrupt path can land it.

Rows: the abort from the process running the turn (SQLite, the in-process hint), and from
another process, the way an HTTP front end aborts a turn a worker runs: SQLite and DynamoDB
(moto) by the holder's 150 ms poll, Redis by pub/sub. The queue is not on this path (an
abort's wake is dropped while the lease is held), so RQ and SQS do not change the figures:
the rows are named by the pair they stand for.

``python -m bench.abort_latency [--samples 40]`` prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pydantic

import fxdurable as fx

SLOW_BEAT = fx.WorkerSettings(heartbeat_s=30, lease_ttl_s=90, scan_interval_s=600)

# Reads session ids on stdin; for each, aborts it and prints when the call began and ended.
ABORTER = """
import sys, time
from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
journal = Journal(open_store(sys.argv[1]), SystemClock(), RandomIds())
print("ready", flush=True)
for line in sys.stdin:
    at = time.time()
    journal.request_abort(line.strip())
    print(at, time.time(), flush=True)
"""


class Job(pydantic.BaseModel):
    name: str


def _agent(cancelled_at: dict[str, float], started: dict[str, asyncio.Event]) -> fx.Agent:
    async def hold(inp: Job, ctx: fx.ToolContext) -> str:
        started[ctx.session_id].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled_at[ctx.session_id] = time.time()
            raise
        return "never"

    tool = fx.define_tool("hold", description="holds", input_model=Job, execute=hold)
    model = fx.ScriptedModel(lambda request: fx.reply("", fx.call("hold", name="x")))
    return fx.Agent("bench", model, tools=[tool])


async def measure(url: str, samples: int, *, remote: bool) -> list[tuple[float, float]]:
    """Latencies in seconds, from the abort call and from its commit's return; ``remote``:
    the abort comes from another process."""
    cancelled_at: dict[str, float] = {}
    started: dict[str, asyncio.Event] = {}
    aborter = None
    if remote:
        aborter = subprocess.Popen(
            [sys.executable, "-c", ABORTER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert aborter.stdout is not None and aborter.stdin is not None
        assert (await asyncio.to_thread(aborter.stdout.readline)).strip() == "ready"
    latencies = []
    pacing = random.Random(7)
    try:
        async with fx.Runtime([_agent(cancelled_at, started)], store=url, settings=SLOW_BEAT) as rt:
            for i in range(samples):
                sid = f"abort-{i}"
                started[sid] = asyncio.Event()
                s = rt.session(sid)
                sub = await s.submit("job")
                await asyncio.wait_for(started[sid].wait(), 30)
                # Abort at a random point of the holder's poll period, not always the same.
                await asyncio.sleep(pacing.uniform(0.05, 0.35))
                if aborter is not None:
                    assert aborter.stdin is not None and aborter.stdout is not None
                    aborter.stdin.write(sid + "\n")
                    aborter.stdin.flush()
                    line = await asyncio.to_thread(aborter.stdout.readline)
                    at, committed = (float(x) for x in line.split())
                else:
                    at = time.time()
                    await s.abort()
                    committed = time.time()
                settled = await s.wait(sub.id, timeout=30)
                assert settled.status.value == "aborted", settled.status
                latencies.append((cancelled_at[sid] - at, cancelled_at[sid] - committed))
    finally:
        if aborter is not None:
            assert aborter.stdin is not None
            aborter.stdin.close()
            aborter.wait(timeout=30)
    return latencies


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered) * 1000:.1f} ms | {p99 * 1000:.1f} ms"


def _row(name: str, latencies: list[tuple[float, float]]) -> str:
    whole = _ms([call for call, _ in latencies])
    after = _ms([since for _, since in latencies])
    return f"| {name} | {len(latencies)} | {whole} | {after} |"


@contextlib.contextmanager
def _redis(tmp: Path) -> Iterator[str | None]:
    from bench.redis_server import RedisServer, unavailable_reason

    if unavailable_reason() is not None:
        yield None
        return
    with RedisServer(tmp / "redis", appendonly=True) as server:
        yield server.store_url(0, "abort")


@contextlib.contextmanager
def _dynamodb(tmp: Path) -> Iterator[str | None]:
    from bench.dynamodb_steps import unavailable_reason
    from bench.moto_server import moto_server

    if unavailable_reason() is not None:
        yield None
        return
    for key, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(key, value)
    (tmp / "moto").mkdir()
    with moto_server(tmp / "moto") as endpoint:
        yield f"dynamodb://fxd-abort-bench?region=us-east-1&endpoint_url={endpoint}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args(argv)
    rows = [
        "| pair (the abort from) | samples | p50 | p99 | p50 after the commit | p99 after |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)

        def sample(name: str, url: str | None, *, remote: bool = True) -> str:
            if url is None:
                return f"| {name} | skipped: its server is not installed | | | | |"
            return _row(name, asyncio.run(measure(url, args.samples, remote=remote)))

        sqlite = f"sqlite:///{tmp}/abort.db"
        rows.append(sample("SQLite embedded (the same process)", sqlite, remote=False))
        rows.append(sample("SQLite embedded (another process: poll)", sqlite))
        with _redis(tmp) as redis_url:
            rows.append(sample("RQ + Redis (another process: pub/sub)", redis_url))
        with _dynamodb(tmp) as ddb_url:
            rows.append(sample("SQS + DynamoDB on moto (another process: poll)", ddb_url))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
