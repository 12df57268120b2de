"""Wake latency on the PostgreSQL queue: from a wake's admission (its enqueue committed) to
an idle consumer holding it, with LISTEN/NOTIFY against a 1 s polling baseline (what DBOS's
queues do by default).

Both consumers are :class:`~fxdurable.queues.postgres.PgConsumer` on one server, in a thread
of this process: ``listen`` blocks in ``receive`` (20 s safety poll) and is woken by the
enqueue's NOTIFY; ``poll`` claims with ``wait_s=0`` once a second. Each sample enqueues once
the consumer is idle, at a random phase of the poll. Reported: p50 and p99 in milliseconds.

``python -m bench.wake_latency [--samples N]``; the server is ``FXD_BENCH_POSTGRES_URL`` or one
started for the run (Debian's postgresql, as the test suite's; tests/postgres_support.py).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from bench.postgres_server import postgres_server

__all__ = ["WakeLatency", "measure_wake_latency", "render_wake_latency"]

POLL_S = 1.0
TARGET_P50_MS = 10.0


@dataclass(frozen=True, slots=True)
class WakeLatency:
    listen_ms: list[float]
    poll_ms: list[float]
    note: str = ""  # why nothing was measured


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _samples(url: str, *, samples: int, poll: bool) -> list[float]:
    from fxdurable.queues.postgres import PgConsumer, PgQueue

    queue = PgQueue(f"{url}?schema=bench_{uuid.uuid4().hex[:8]}")
    consumer = PgConsumer(queue, wait_s=0 if poll else 20)
    claimed = threading.Event()
    idle = threading.Event()
    stop = threading.Event()
    at: list[float] = []

    def consume() -> None:
        while not stop.is_set():
            idle.set()
            messages = consumer.receive(1, visibility_s=30)
            if messages:
                at.append(time.perf_counter())
                for message in messages:
                    consumer.delete(message)
                claimed.set()
            elif poll:
                stop.wait(POLL_S)

    queue.send_now("warm-up", reason="bench")  # connect, migrate, LISTEN
    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    claimed.wait(30)
    out: list[float] = []
    try:
        for i in range(samples):
            claimed.clear()
            idle.wait(30)
            # Let the consumer settle into its wait (LISTEN, or the poll's pause) at a random
            # phase: a wake lands anywhere in a poll interval.
            time.sleep(random.uniform(0.01, POLL_S if poll else 0.05))
            start = time.perf_counter()
            queue.send_now(f"s{i}", reason="bench")
            if not claimed.wait(30):
                raise RuntimeError("a wake was not claimed within 30 s")
            out.append((at[-1] - start) * 1000)
    finally:
        stop.set()
        consumer.interrupt()
        thread.join(30)
        consumer.close()
        queue.close()
    return out


def measure_wake_latency(*, samples: int = 50, poll_samples: int = 10) -> WakeLatency:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return WakeLatency([], [], "psycopg is not installed: pip install 'fxdurable[postgres]'")
    with postgres_server() as url:
        if url is None:
            return WakeLatency([], [], "no PostgreSQL (apt-get install postgresql)")
        listen = _samples(url, samples=samples, poll=False)
        polled = _samples(url, samples=poll_samples, poll=True)
    return WakeLatency(listen, polled)


def render_wake_latency(figures: WakeLatency) -> str:
    lines = [
        "wake latency on the Postgres queue (enqueue committed -> idle consumer holds it, ms)",
        "",
        f"{'consumer':<26} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'target':>9}",
    ]
    if figures.note:
        return "\n".join([*lines, f"skipped: {figures.note}"])
    for label, values, target in (
        ("LISTEN/NOTIFY", figures.listen_ms, f"≤ {TARGET_P50_MS:g}"),
        (f"polling every {POLL_S:g} s", figures.poll_ms, ""),
    ):
        lines.append(
            f"{label:<26} {len(values):>4} {statistics.median(values):>8.2f} "
            f"{_pct(values, 0.99):>8.2f} {target:>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_latency")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--poll-samples", type=int, default=10)
    args = parser.parse_args(argv)
    figures = measure_wake_latency(samples=args.samples, poll_samples=args.poll_samples)
    print(render_wake_latency(figures))
    return 0 if not figures.note else 1


if __name__ == "__main__":
    sys.exit(main())
