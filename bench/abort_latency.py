"""Abort and steer latency per backend pair (issue 28 §2; docs/aborting.md), target p99 ≤
500 ms on every pair.

An abort sample: a turn's tool call waits forever (an async tool on an event nobody sets);
the session is aborted; the latency runs from the abort call (its commit included) to the tool
observing its cancellation. A steer sample: a turn's model streams a reply that never ends (a
delta every 20 ms, a partial written every second); the session is steered; the latency runs
from the steer call (its commit included) to the stream being cut, the first moment the
runtime stopped consuming it (the model's generator seeing its cancellation or its close).
The turn then asks the model again with the steer, which answers at once. The heartbeat is
30 s, so only the interrupt path can land either.

Per pair, two rows: the interrupt from the process running the turn (the in-process hint),
and from another process, the way an HTTP front end reaches a turn a worker runs: SQLite and
DynamoDB (moto) by the holder's 150 ms poll while a call runs, Redis by pub/sub, Postgres by
LISTEN/NOTIFY. Aborts and steers alternate, each at a random point of the holder's poll
period.

``python -m bench.abort_latency [--samples 40]`` prints the table; ``make bench`` writes it
into docs/benchmarks.md ("Abort and steer latency").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pydantic

import fxdurable as fx
from bench.interrupt_pairs import PAIRS
from fxdurable.core.notify import Notifier
from fxdurable.runtime.models.base import Finish, StreamPart, TextDelta

__all__ = [
    "TARGET_P99_S",
    "InterruptLatency",
    "LatencyRow",
    "measure_interrupts",
    "render_interrupts",
]

TARGET_P99_S = 0.5
SLOW_BEAT = fx.WorkerSettings(heartbeat_s=30, lease_ttl_s=90, scan_interval_s=600)
STEER = "stop and say ok"
KINDS = ("abort", "steer")

# Reads "KIND SESSION" lines on stdin; for each, aborts or steers the session and prints when
# the call began and when it returned (its commit and its push made).
INTERRUPTER = f"""
import sys, time
from fxdurable.backends import open_store
from fxdurable.core.clock import RandomIds, SystemClock
from fxdurable.core.journal import Journal
journal = Journal(open_store(sys.argv[1]), SystemClock(), RandomIds())
print("ready", flush=True)
for line in sys.stdin:
    kind, sid = line.split()
    at = time.time()
    if kind == "abort":
        journal.request_abort(sid)
    else:
        assert journal.steer(sid, {STEER!r}).steered
    print(at, time.time(), flush=True)
"""


class Job(pydantic.BaseModel):
    name: str


@dataclass(slots=True)
class _Probe:
    """What the tool and the model saw, by session: the call or stream under way, and when
    it stopped."""

    running: dict[str, asyncio.Event] = field(default_factory=dict)
    stopped_at: dict[str, float] = field(default_factory=dict)


class _Model:
    """ "job": one call of the holding tool; "write": a reply streaming forever until its
    request shows the steer, which it answers at once."""

    name = "bench-interrupts"

    def __init__(self, probe: _Probe) -> None:
        self._probe = probe

    async def stream(self, request: fx.ModelRequest) -> AsyncIterator[StreamPart]:
        texts = [m.text for m in request.messages]
        if STEER in texts:
            yield Finish(fx.reply("ok"))
            return
        if texts[-1] == "job":
            yield Finish(fx.reply("", fx.call("hold", name="x")))
            return
        sid = request.session_id or ""
        try:
            while True:
                yield TextDelta("word ")
                self._probe.running[sid].set()  # a delta was consumed: the stream is live
                await asyncio.sleep(0.02)
        finally:  # cancelled in its sleep, or closed at its yield: the runtime stopped reading
            self._probe.stopped_at.setdefault(sid, time.time())


def _agent(probe: _Probe) -> fx.Agent:
    async def hold(inp: Job, ctx: fx.ToolContext) -> str:
        probe.running[ctx.session_id].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            probe.stopped_at[ctx.session_id] = time.time()
            raise
        return "never"

    tool = fx.define_tool("hold", description="holds", input_model=Job, execute=hold)
    return fx.Agent("bench", _Model(probe), tools=[tool])


Sample = tuple[float, float]  # seconds: from the call, from its return (commit and push made)


@dataclass(frozen=True, slots=True)
class LatencyRow:
    pair: str
    path: str  # "same process", or "other process: <how it reaches the holder>"
    abort: list[Sample]
    steer: list[Sample]
    note: str | None = None  # "skipped: ..." or "failed: ..." (no samples then)


@dataclass(frozen=True, slots=True)
class InterruptLatency:
    samples: int  # asked per kind and row
    rows: list[LatencyRow]

    @property
    def failed(self) -> bool:
        return any((row.note or "").startswith("failed") for row in self.rows)


class _Interrupter:
    """Aborts and steers from a process of its own (``INTERRUPTER``)."""

    def __init__(self, url: str) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", INTERRUPTER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def start(self) -> None:
        assert (await self._line()).strip() == "ready"

    async def send(self, kind: str, sid: str) -> Sample:
        assert self._proc.stdin is not None
        self._proc.stdin.write(f"{kind} {sid}\n")
        self._proc.stdin.flush()
        at, returned = (float(x) for x in (await self._line()).split())
        return at, returned

    async def _line(self) -> str:
        assert self._proc.stdout is not None
        line = await asyncio.to_thread(self._proc.stdout.readline)
        if not line:
            raise RuntimeError(f"the interrupting process exited ({self._proc.wait()})")
        return line

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


async def measure(url: str, samples: int, *, remote: bool, tag: str) -> dict[str, list[Sample]]:
    """Latencies in seconds of ``samples`` aborts and as many steers, alternating, each from
    the call and from its return; ``remote``: they come from another process."""
    probe = _Probe()
    interrupter = _Interrupter(url) if remote else None
    out: dict[str, list[Sample]] = {kind: [] for kind in KINDS}
    pacing = random.Random(7)
    try:
        if interrupter is not None:
            await interrupter.start()
        async with fx.Runtime([_agent(probe)], store=url, settings=SLOW_BEAT) as rt:
            for i in range(samples):
                for kind in KINDS:
                    sid = f"{tag}-{kind}-{i}"
                    probe.running[sid] = asyncio.Event()
                    s = rt.session(sid)
                    sub = await s.submit("job" if kind == "abort" else "write")
                    await asyncio.wait_for(probe.running[sid].wait(), 30)
                    # At a random point of the holder's poll period, not always the same.
                    await asyncio.sleep(pacing.uniform(0.05, 0.35))
                    if interrupter is not None:
                        at, returned = await interrupter.send(kind, sid)
                    else:
                        at = time.time()
                        await (s.abort() if kind == "abort" else s.steer(STEER))
                        returned = time.time()
                    settled = await s.wait(sub.id, timeout=30)
                    expected = "aborted" if kind == "abort" else "completed"
                    assert settled.status.value == expected, (sid, settled.status)
                    stopped = probe.stopped_at[sid]
                    out[kind].append((stopped - at, stopped - returned))
    finally:
        if interrupter is not None:
            interrupter.close()
    return out


def measure_interrupts(
    tmp: Path,
    *,
    samples: int,
    on_progress: Callable[[str], None] = lambda _: None,
    pairs: tuple[str, ...] | None = None,
) -> InterruptLatency:
    """Every pair (or those named in ``pairs``) on a server of its own under ``tmp``, each
    stopped before the next starts. A pair whose server is missing, or whose run failed, is a
    row saying so."""
    rows: list[LatencyRow] = []
    for pair in PAIRS:
        if pairs is not None and pair.name not in pairs:
            continue
        place = tmp / f"interrupts-{len(rows)}"
        place.mkdir()
        paths = (("same process", False), (f"other process: {pair.push}", True))
        with pair.server(place) as (url, missing):
            for n, (path, remote) in enumerate(paths):
                if url is None:
                    rows.append(LatencyRow(pair.name, path, [], [], missing))
                    continue
                try:
                    got = asyncio.run(measure(url, samples, remote=remote, tag=f"p{n}"))
                except Exception as exc:
                    traceback.print_exc()
                    note = f"failed: {type(exc).__name__}: {exc}"
                    rows.append(LatencyRow(pair.name, path, [], [], note))
                    continue
                rows.append(LatencyRow(pair.name, path, got["abort"], got["steer"]))
                on_progress(f"abort and steer latency: {pair.name}, {path}")
    return InterruptLatency(samples, rows)


#: What the section of docs/benchmarks.md says above its table.
WORKLOAD = f"""Issue 28's target: p99 ≤ {TARGET_P99_S * 1000:.0f} ms on every pair, from the abort \
or steer call (its commit included) to the turn acting on it. An abort sample: a tool call \
waiting forever (an async tool on an event nobody sets) is aborted, and the latency ends when the \
tool observes its cancellation. A steer sample: a model reply that never ends (a delta every 20 \
ms, a partial written every second) is steered, and the latency ends when the runtime stops \
consuming the stream (the model's generator cancelled in its wait, or closed). The heartbeat is \
30 s, so only the interrupt path lands either. Per pair, the interrupt comes from the process \
running the turn (the in-process hint), and from another process, as an HTTP front end reaches a \
worker's turn: SQLite and DynamoDB by the holder's {Notifier.poll_s * 1000:.0f} ms poll while a \
call or a stream runs, Redis by pub/sub, Postgres by LISTEN/NOTIFY. Aborts and steers alternate, \
each at a random point of the poll period; a fresh session per sample. The queue is not on this \
path (a wake is dropped while the lease is held): the pairs are named by their store. The last \
figure is the p99 from the call's return (its commit and push made), which leaves out the store's \
own commit time (slow on moto), and is below zero where the turn acted before the call \
returned (in the same process, the hint fires before the call's own bookkeeping ends). \
`python -m bench.abort_latency --samples N` measures it alone."""


def p50_p99(values: list[float]) -> tuple[float, float]:
    """Median and nearest-rank 99th percentile."""
    ordered = sorted(values)
    return statistics.median(ordered), ordered[round(0.99 * (len(ordered) - 1))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def render_interrupts(figures: InterruptLatency) -> str:
    """The table (markdown): per row, p50 and p99 from the call of each kind, the p99 from
    the call's return, and whether both p99s meet the target."""
    lines = [
        "| pair | path | abort p50 | abort p99 | steer p50 | steer p99 | samples "
        "| p99 from the call's return (abort / steer) | p99 ≤ 500 ms? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in figures.rows:
        if row.note is not None:
            lines.append(f"| {row.pair} | {row.path} | {row.note} | | | | | | |")
            continue
        cells, after, p99s = [], [], []
        for kind in (row.abort, row.steer):
            p50, p99 = p50_p99([call for call, _ in kind])
            cells += [_ms(p50), _ms(p99)]
            after.append(_ms(p50_p99([since for _, since in kind])[1]))
            p99s.append(p99)
        met = "yes" if max(p99s) <= TARGET_P99_S else "no"
        n = f"{len(row.abort)} + {len(row.steer)}"
        lines.append(
            f"| {row.pair} | {row.path} | {' | '.join(cells)} | {n} | {' / '.join(after)} | {met} |"
        )
    return "\n".join(lines)


def to_json(figures: InterruptLatency) -> dict[str, object]:
    """Every sample (ms, from the call and from its return) and their p50/p99, per row."""

    def kind(samples: list[Sample]) -> dict[str, object]:
        calls = [round(c * 1000, 2) for c, _ in samples]
        after = [round(a * 1000, 2) for _, a in samples]
        if not samples:
            return {"ms": [], "from_return_ms": []}
        p50, p99 = p50_p99(calls)
        a50, a99 = p50_p99(after)
        return {
            "p50_ms": p50,
            "p99_ms": p99,
            "from_return_p50_ms": a50,
            "from_return_p99_ms": a99,
            "ms": calls,
            "from_return_ms": after,
        }

    return {
        "target_p99_ms": TARGET_P99_S * 1000,
        "samples": figures.samples,
        "rows": [
            {
                "pair": row.pair,
                "path": row.path,
                "note": row.note,
                "abort": kind(row.abort),
                "steer": kind(row.steer),
            }
            for row in figures.rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.abort_latency", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--samples", type=int, default=40, help="per kind and row")
    parser.add_argument(
        "--pair", action="append", choices=[p.name for p in PAIRS], help="only these pairs"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fxd-interrupts-") as name:
        pairs = tuple(args.pair) if args.pair else None
        figures = measure_interrupts(
            Path(name),
            samples=args.samples,
            pairs=pairs,
            on_progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    print(render_interrupts(figures))
    return 1 if figures.failed else 0


if __name__ == "__main__":
    sys.exit(main())
