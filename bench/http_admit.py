"""Admission latency over HTTP: how long a client waits for the first line of ``POST /chat``.

A real ``fxdurable serve`` (uvicorn, bearer tokens, the embedded SQLite store at its default
``synchronous=FULL``, the in-process queue) runs in a subprocess on a free port of 127.0.0.1;
the bench is its one client, a keep-alive :class:`httpx.Client` sending one request at a time.

* admit latency: from sending ``POST /chat`` until its first line (``turn_start``) has arrived.
  Behind it: authentication, parsing, the admission transaction (one fsync at FULL), the wake
  enqueued, the first read of the session's events, and the stream's first chunk. Measured for
  a new session per request (no ``sessionId``) and for one session that keeps growing (the same
  ``sessionId`` every time). The rest of each stream is read, untimed, until ``turn_end``, so
  no turn runs under the next measurement (the worker's lease release, one transaction after
  the settle, is almost always done by then: the stream polls the store at 10 ms or more).
* baselines, in the same run and interleaved with it: ``GET /healthz`` on the same server and
  connection (HTTP, routing and uvicorn's access log, no store), and a raw SQLite FULL commit
  on the same disk (:class:`bench.sqlite_steps.RawCommit`).

Cases alternate in batches (healthz, new session, same session, raw commits), so a drift lands
on all of them; each figure is a percentile of the per-request samples of every batch after the
warm-up. The agent answers with one model reply and no tools: the turn is not what is measured.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.sqlite_steps import RawCommit, sqlite_url
from fxdurable import Agent, ScriptedModel, reply
from fxdurable.http.lines import Marker
from fxdurable.testing.net import free_port, wait_healthy

__all__ = [
    "HTTP_RATIO_NAMES",
    "HttpFigures",
    "http_agent",
    "measure_http_admit",
    "render_http",
    "unavailable_reason",
]

REPO = Path(__file__).resolve().parents[1]
AGENTS_SPEC = "bench.http_admit:http_agent"
PRINCIPAL = "bench"
READY_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 30.0
KINDS = ("healthz", "new", "same", "raw")
SAME_SESSION = "bench-same"

HTTP_RATIO_NAMES = (
    "http admit/healthz p50 new session",
    "http admit/healthz p99 new session",
    "http admit/healthz p50 same session",
    "http admit/healthz p99 same session",
    "http admit p50/raw_commit FULL new session",
    "http admit p50/raw_commit FULL same session",
)

_WIDTH = 50
_LABELS = {
    "healthz": "GET /healthz round trip",
    "new": "POST /chat to turn_start, new session",
    "same": "POST /chat to turn_start, same session",
    "raw": "raw commit (WAL, 1 INSERT), FULL",
}


def http_agent() -> Agent:
    """The served agent (``--agents bench.http_admit:http_agent``): one reply, no tools."""
    return Agent("bench-http", ScriptedModel([reply("Admitted and answered.")]))


def unavailable_reason() -> str | None:
    """Why the HTTP rows cannot be measured here, or None when they can."""
    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed: pip install 'fxdurable[http]'"
    return None


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least ``q`` of them at or below."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class HttpFigures:
    """Per-request seconds by kind (``KINDS``), warm-up excluded."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    lines_per_turn: float = 0.0  # lines each admitted stream carried, turn_start to turn_end
    events_same_session: int = 0  # the grown session's length at the end

    def p50(self, kind: str) -> float:
        return statistics.median(self.samples[kind])

    def p99(self, kind: str) -> float:
        return percentile(self.samples[kind], 0.99)

    def mean(self, kind: str) -> float:
        return statistics.fmean(self.samples[kind])

    def ratios(self) -> dict[str, tuple[float, str]]:
        out: dict[str, tuple[float, str]] = {}
        hz50, hz99, raw = self.p50("healthz"), self.p99("healthz"), self.p50("raw")
        for kind, label in (("new", "new session"), ("same", "same session")):
            p50, p99 = self.p50(kind), self.p99(kind)
            out[f"http admit/healthz p50 {label}"] = (
                p50 / hz50,
                f"{p50 * 1e3:.2f} ms beside {hz50 * 1e3:.2f} ms",
            )
            out[f"http admit/healthz p99 {label}"] = (
                p99 / hz99,
                f"{p99 * 1e3:.2f} ms beside {hz99 * 1e3:.2f} ms",
            )
            out[f"http admit p50/raw_commit FULL {label}"] = (
                p50 / raw,
                f"raw FULL commit p50 {raw * 1e3:.2f} ms on the same disk",
            )
        return out


def render_http(figures: HttpFigures | None, note: str | None) -> str:
    """The HTTP section: its table and its ``ratio`` lines, or one line saying why not."""
    if figures is None:
        return f"HTTP rows {note}"
    n = len(figures.samples["new"])
    lines = [
        "HTTP admission (fxdurable serve under uvicorn, bearer token, SQLite FULL, local queue; "
        "one keep-alive httpx client, one request at a time): × healthz = p50 / GET /healthz p50",
        "",
        f"{'case':<{_WIDTH}} {'p50 µs':>10} {'p99 µs':>10} {'mean µs':>10} {'× healthz':>10}",
    ]
    hz50 = figures.p50("healthz")
    for kind in KINDS:
        lines.append(
            f"{_LABELS[kind]:<{_WIDTH}} {figures.p50(kind) * 1e6:>10,.1f} "
            f"{figures.p99(kind) * 1e6:>10,.1f} {figures.mean(kind) * 1e6:>10,.1f} "
            f"{figures.p50(kind) / hz50:>10,.2f}"
        )
    lines += [
        f"({n} requests of each kind after warm-up; {figures.lines_per_turn:.1f} lines per "
        f"admitted stream; the same session ended with {figures.events_same_session:,} events)",
        "",
        "ratios, HTTP (same run; admit = POST /chat until its turn_start line arrives):",
    ]
    width = max(len(name) for name in HTTP_RATIO_NAMES)
    ratios = figures.ratios()
    for name in HTTP_RATIO_NAMES:
        value, note_ = ratios[name]
        lines.append(f"ratio {name:<{width}} = {value:8.2f}   ({note_})")
    return "\n".join(lines)


# -- the server ------------------------------------------------------------------------------


class _Server:
    """``fxdurable serve`` in a subprocess, its output in ``directory/serve.log``."""

    def __init__(self, directory: Path, token: str) -> None:
        self.directory = directory
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "serve.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["FXD_HTTP_TOKENS"] = f"{PRINCIPAL}={self.token}"
        # Timers far longer than the run (as bench.runtime_turns.SETTINGS): no heartbeat or
        # reconciliation scan transaction lands inside a measurement.
        env["FXD_LEASE_TTL_S"] = "600"
        env["FXD_HEARTBEAT_S"] = "300"
        env["FXD_SCAN_INTERVAL_S"] = "300"
        command = [
            sys.executable,
            "-m",
            "fxdurable.cli.main",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--agents",
            AGENTS_SPEC,
            "--store",
            sqlite_url(self.directory / "http.db"),  # synchronous=FULL, the default
        ]
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen(
                command, cwd=self.directory, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        wait_healthy(f"{self.url}/healthz", self._proc, timeout_s=READY_TIMEOUT_S, output=self.tail)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the client ------------------------------------------------------------------------------


def _admit(client: httpx.Client, session_id: str | None) -> tuple[float, int]:
    """Seconds until the first line of ``POST /chat``, and the stream's line count; the rest of
    the stream is read (untimed) to its ``turn_end``."""
    body: dict[str, str] = {"prompt": "Admit me."}
    if session_id is not None:
        body["sessionId"] = session_id
    request = client.build_request("POST", "/chat", json=body)
    start = time.perf_counter()
    response = client.send(request, stream=True)
    try:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"POST /chat answered {response.status_code}: {response.text}")
        lines = response.iter_lines()
        first = next(line for line in lines if line)
        elapsed = time.perf_counter() - start
        if json.loads(first)["type"] != Marker.TURN_START:
            raise RuntimeError(f"the stream began with {first!r}, not turn_start")
        last, count = first, 1
        for line in lines:
            if line:
                last, count = line, count + 1
    finally:
        response.close()
    if json.loads(last)["type"] != Marker.TURN_END:
        raise RuntimeError(f"the stream ended with {last!r}, not turn_end")
    return elapsed, count


def _healthz(client: httpx.Client) -> float:
    start = time.perf_counter()
    response = client.get("/healthz")
    elapsed = time.perf_counter() - start
    if response.status_code != 200:
        raise RuntimeError(f"GET /healthz answered {response.status_code}")
    return elapsed


def measure_http_admit(
    tmp: Path,
    *,
    requests: int,
    batches: int,
    warm_up: int,
    on_progress: Callable[[str], None],
) -> HttpFigures:
    """``requests`` timed requests of each kind over ``batches`` interleaved batches, after
    ``warm_up`` untimed ones of each kind."""
    directory = tmp / "http"
    directory.mkdir()
    token = secrets.token_urlsafe(32)
    server = _Server(directory, token)
    raw = RawCommit(directory / "raw-full.db", "FULL")
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    lines: list[int] = []
    per_batch = max(1, requests // batches)
    try:
        server.start()
        on_progress(f"fxdurable serve up on port {server.port}")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(
            base_url=server.url, headers=headers, timeout=REQUEST_TIMEOUT_S
        ) as client:

            def run(kind: str) -> float:
                if kind == "healthz":
                    return _healthz(client)
                if kind == "raw":
                    start = time.perf_counter()
                    raw.commit()
                    return time.perf_counter() - start
                elapsed, count = _admit(client, SAME_SESSION if kind == "same" else None)
                lines.append(count)
                return elapsed

            for kind in KINDS:
                for _ in range(warm_up):
                    run(kind)
            lines.clear()
            for _ in range(batches):
                for kind in KINDS:
                    for _ in range(per_batch):
                        samples[kind].append(run(kind))
            session = client.get(f"/sessions/{SAME_SESSION}").json()
    finally:
        raw.close()
        server.stop()
    return HttpFigures(
        samples=samples,
        lines_per_turn=statistics.fmean(lines),
        events_same_session=int(session["cursor"]),
    )
