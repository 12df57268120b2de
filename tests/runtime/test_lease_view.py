"""``ctx.lease``, ``on_lost_lease`` and the lease margin (issue 22 §1, docs/leases.md).

In one process, on SQLite: the store goes away (another connection's open ``BEGIN EXCLUSIVE``,
past a short busy timeout) while a sync tool runs. A tool that watches ``ctx.lease`` sees it
held, with its expiry, and sees it lost once the heartbeat gives up, in time to stop by itself
(nothing escalates). One that does not watch is still inside its call at its run's stop
deadline: the runtime's ``on_lost_lease`` is called then (here a callable that releases the
tool; the default would end the process), before the lease expires. The processes of the
other pairs are in ``tests/workers/test_lost_lease_effects.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from fxrt_support import db_url, owned_store, rounds_done, run

import fxdurable as fx
from fxdurable.errors import ConfigurationError
from fxdurable.runtime import leases
from fxdurable.runtime.leases import LeaseView, LostLease

SETTINGS = fx.WorkerSettings(
    heartbeat_s=0.2, lease_ttl_s=2.0, lease_margin_s=0.4, scan_interval_s=0.2
)
MARGIN_S = SETTINGS.margin_s


class Step(pydantic.BaseModel):
    n: int = 0


@pytest.fixture
def locked(tmp_path: Any) -> Iterator[Any]:
    """``(url, lock)``: a store URL whose writers fail fast, and a function that holds the
    database exclusively for the length of a ``with``."""
    path = str(tmp_path / "fx.db")

    class Lock:
        def __enter__(self) -> None:
            self.other = sqlite3.connect(path, isolation_level=None, timeout=10)
            self.other.execute("BEGIN EXCLUSIVE")

        def __exit__(self, *_: object) -> None:
            self.other.execute("ROLLBACK")
            self.other.close()

    yield db_url(tmp_path) + "&busy_timeout_ms=50", Lock()


def _blocking_deploy(started: threading.Event, release: threading.Event) -> fx.Tool:
    @fx.tool(replay="unsafe")
    def deploy(inp: Step, ctx: fx.ToolContext) -> str:
        "Blocks until released: it never looks at its lease."
        started.set()
        release.wait(30)
        return "deployed"

    return deploy


def _agent(tool: fx.Tool) -> fx.Agent:
    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if rounds_done(request) == 0:
            return fx.reply("working", fx.call(tool.name))
        return fx.reply("done")

    return fx.Agent("a", fx.ScriptedModel(policy), tools=[tool])


def test_a_watching_sync_tool_sees_its_lease_lost_and_stops_before_anything_escalates(locked):
    url, lock = locked
    seen: list[tuple[bool, float | None, float]] = []
    started, stopped = threading.Event(), threading.Event()
    lost_calls: list[LostLease] = []
    signals: list[asyncio.Event] = []

    @fx.tool(replay="unsafe")
    def migrate(inp: Step, ctx: fx.ToolContext) -> str:
        "A long batch job that stops at a safe point once its lease is going."
        seen.append((ctx.lease.held, ctx.lease.expires_at, ctx.lease.remaining_s()))
        signals.append(ctx.cancelled)
        started.set()
        deadline = time.monotonic() + 30
        while ctx.lease.held and time.monotonic() < deadline:
            time.sleep(0.01)  # one batch
        seen.append((ctx.lease.held, ctx.lease.expires_at, ctx.lease.remaining_s()))
        stopped.set()
        raise RuntimeError("lease going: stopped between batches")

    async def main() -> float:
        async with fx.Runtime(
            [_agent(migrate)],
            store=owned_store(url),
            settings=SETTINGS,
            on_lost_lease=lost_calls.append,
        ) as rt:
            await rt.session("s").submit("go")
            await asyncio.to_thread(started.wait, 10)
            with lock:
                outage_began = time.monotonic()
                assert await asyncio.to_thread(stopped.wait, 10)
                stopped_after = time.monotonic() - outage_began
                # Past the stop deadline, still in the outage: nothing escalated.
                await asyncio.sleep(SETTINGS.lease_ttl_s)
            return stopped_after

    stopped_after = run(main(), timeout=30)
    (held, expires_at, remaining), (held_after, _, remaining_after) = seen
    assert held and expires_at is not None and abs(expires_at - time.time()) < 60
    assert 0 < remaining <= SETTINGS.lease_ttl_s - MARGIN_S / 2
    assert not held_after and remaining_after == 0.0
    # Stopped once the heartbeat gave up (the TTL minus the margin), before the stop deadline.
    assert stopped_after < SETTINGS.lease_ttl_s - MARGIN_S / 2
    assert lost_calls == []
    assert signals[0].is_set(), "ctx.cancelled is set too when the run is cancelled"


def test_on_lost_lease_is_called_before_the_lease_expires_for_a_tool_still_running(locked):
    url, lock = locked
    started, release = threading.Event(), threading.Event()
    lost: list[tuple[LostLease, float]] = []

    deploy = _blocking_deploy(started, release)

    def on_lost_lease(what: LostLease) -> None:
        lost.append((what, time.monotonic()))
        release.set()  # the embedder's own stop

    async def main() -> float:
        async with fx.Runtime(
            [_agent(deploy)],
            store=owned_store(url),
            settings=SETTINGS,
            on_lost_lease=on_lost_lease,
        ) as rt:
            await rt.session("s").submit("go")
            await asyncio.to_thread(started.wait, 10)
            with lock:
                began = time.monotonic()
                await asyncio.to_thread(release.wait, 10)
            return began

    began = run(main(), timeout=30)
    ((what, when),) = lost
    assert what.session_id == "s" and what.executing == ("deploy",)
    assert what.expires_in_s > 0, "told before the lease expires"
    # The outage began after the last renewal: the deadline comes within one TTL of it.
    assert when - began < SETTINGS.lease_ttl_s


def test_the_default_ends_the_process_through_its_seam_with_the_guards_line(locked, monkeypatch):
    """``on_lost_lease="exit"`` (the default) calls ``leases.exit_process`` with status 75 and
    the line it wrote; this process stands in for it (the real exit is
    tests/workers/test_lost_lease_effects.py's)."""
    url, lock = locked
    started, release = threading.Event(), threading.Event()
    exits: list[tuple[int, str]] = []

    def stand_in(status: int, line: str) -> None:
        exits.append((status, line))
        release.set()

    monkeypatch.setattr(leases, "exit_process", stand_in)

    deploy = _blocking_deploy(started, release)

    async def main() -> None:
        async with fx.Runtime([_agent(deploy)], store=owned_store(url), settings=SETTINGS) as rt:
            await rt.session("s").submit("go")
            await asyncio.to_thread(started.wait, 10)
            with lock:
                await asyncio.to_thread(release.wait, 10)

    run(main(), timeout=30)
    ((status, line),) = exits
    assert status == leases.LOST_LEASE_EXIT_STATUS == 75
    assert "lease on session s could not be renewed" in line and "(deploy)" in line, line


def test_outside_a_runtime_a_tool_has_a_lease_that_never_ends():
    view = LeaseView()
    assert view.held and view.expires_at is None and view.remaining_s() == float("inf")
    assert fx.ToolContext(execution_id="x", session_id="s", tool_name="t", attempt=1).lease.held


@pytest.mark.parametrize(
    ("ttl", "beat", "margin", "complaint"),
    [
        (2.0, 1.0, 1.5, "lease_margin_s=1.5 must be positive and leave room for a heartbeat"),
        (2.0, 0.5, 0.0, "lease_margin_s=0 must be positive"),
        (2.0, 2.0, None, "the heartbeat must be shorter than the lease TTL"),
    ],
)
def test_timings_that_cannot_keep_the_promise_are_refused_at_start(ttl, beat, margin, complaint):
    settings = fx.WorkerSettings(lease_ttl_s=ttl, heartbeat_s=beat, lease_margin_s=margin)
    with pytest.raises(ConfigurationError, match=complaint):
        fx.Runtime([fx.Agent("a", fx.ScriptedModel(lambda r: fx.reply("x")))], settings=settings)


def test_the_margin_defaults_to_half_a_heartbeat_where_that_fits(monkeypatch):
    assert fx.WorkerSettings().margin_s == 2.5
    assert fx.WorkerSettings(lease_ttl_s=10, heartbeat_s=4).margin_s == 2.0
    assert fx.WorkerSettings(lease_ttl_s=1, heartbeat_s=0.9).margin_s == pytest.approx(0.05)
    monkeypatch.setenv("FXD_LEASE_MARGIN_S", "1.25")
    assert fx.WorkerSettings.from_env().margin_s == 1.25
    monkeypatch.setenv("FXD_LEASE_MARGIN_S", "soon")
    with pytest.raises(ConfigurationError, match="FXD_LEASE_MARGIN_S must be a number"):
        fx.WorkerSettings.from_env()
