"""Leases under store trouble (issue 9 §2, DESIGN §9: a heartbeat that dies quietly is a
split brain).

The store goes away for real while an unsafe tool call is in flight: SQLite locked by another
connection's open ``BEGIN EXCLUSIVE`` (past a short busy timeout, so each write fails fast),
or a real redis-server paused with ``CLIENT PAUSE <ms> ALL`` (past a short socket timeout).
Two runtimes on one store stand for two workers. An outage shorter than the lease TTL is
ridden out: no takeover, the tool runs once, the turn completes. A longer one stops the
first worker's run before the lease expires, and another worker (either runtime's) recovers
the turn once the store is back: the unsafe call ends ``outcome_unknown``, never run twice.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pytest
from fxrt_support import (
    check_invariants,
    db_url,
    owned_store,
    read,
    rounds_done,
    run,
    submission,
    tasks,
)

import fxdurable as fx
from fxdurable.core.records import ToolTaskRecord
from fxdurable.testing import Effect, check_effects, check_store

# The scan runs often, so that a lease left to expire is taken over at once; a heartbeat is
# a fifteenth of the TTL, so an outage can span several heartbeats and still end within it.
# The margin is set: its default, half a heartbeat, would give a cancelled run 50 ms to unwind
# before the lease guard ends the process (this one: the test's), which a loaded machine's
# event loop can miss (it did: a CI worker gone mid-run).
SETTINGS = fx.WorkerSettings(
    heartbeat_s=0.2, lease_ttl_s=3.0, scan_interval_s=0.2, lease_margin_s=1.0
)
SHORT_OUTAGE_S = 1.0  # five heartbeats, a third of the TTL
# ... held longer (until a renewal has failed) at most this long: the heartbeat gives up at
# TTL - margin (2 s) after the last renewal, which came up to a heartbeat before the outage.
SHORT_OUTAGE_CAP_S = 1.4
LONG_OUTAGE_S = SETTINGS.lease_ttl_s + 1.5
SESSION = "s1"


class Deploy(pydantic.BaseModel):
    version: str


@dataclass
class Outside:
    """What the world saw of the unsafe tool: each start (an effect), end and cancellation."""

    hold_s: float
    started: asyncio.Event = field(default_factory=asyncio.Event)
    effects: list[Effect] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[float] = field(default_factory=list)  # when, on time.monotonic()

    def agent(self) -> fx.Agent:
        @fx.tool(replay="unsafe")
        async def deploy(inp: Deploy, ctx: fx.ToolContext) -> str:
            "Deploy a version (not safe to repeat)."
            self.effects.append(Effect("deploy", ctx.execution_id))
            self.started.set()
            try:
                await asyncio.sleep(self.hold_s)
            except asyncio.CancelledError:
                self.cancelled.append(time.monotonic())
                raise
            self.finished.append(ctx.execution_id)
            return f"deployed {inp.version}"

        def policy(request: fx.ModelRequest) -> fx.ModelResponse:
            if rounds_done(request) == 0:
                return fx.reply("deploying", fx.call("deploy", version="v2"))
            return fx.reply("done")

        return fx.Agent("eng", fx.ScriptedModel(policy), tools=[deploy])


# -- outages -------------------------------------------------------------------------------------


class SqliteLocked:
    """Another connection holds the database file in an open ``BEGIN EXCLUSIVE``: every
    writer waits out its busy timeout and fails; readers go on (WAL)."""

    settings = SETTINGS

    def __init__(self, tmp_path: Any) -> None:
        self.url = db_url(tmp_path) + "&busy_timeout_ms=50"
        self._path = str(tmp_path / "fx.db")

    def store(self) -> Any:
        return owned_store(self.url)

    async def outage(self, seconds: float, until: Callable[[], bool], cap_s: float) -> None:
        other = sqlite3.connect(self._path, isolation_level=None, timeout=10)
        try:
            other.execute("BEGIN EXCLUSIVE")
            await _hold(seconds, until, cap_s)
            other.execute("ROLLBACK")
        finally:
            other.close()


class RedisPaused:
    """A redis-server of this test's own answers no command for a while (``CLIENT PAUSE``),
    and the store's socket timeout is shorter than that, so every call fails meanwhile."""

    settings = SETTINGS

    def __init__(self, server_url: str) -> None:
        self._server_url = server_url
        self.url = f"{server_url}/0?prefix=leases&socket_timeout=0.5"

    def store(self) -> str:
        return self.url  # each runtime opens (and closes) its own connections

    async def outage(self, seconds: float, until: Callable[[], bool], cap_s: float) -> None:
        """One pause of ``seconds``, then quarter-second ones while ``until()`` does not
        hold: a pause cannot be ended early (the client asking is paused too), and a
        command that waited out a pause runs between two (harmless here: only the short
        outage, ridden out anyway, is held past its ``seconds``)."""
        import redis

        client = redis.Redis.from_url(self._server_url)
        began = time.monotonic()
        pause_s = seconds
        try:
            while True:
                await asyncio.to_thread(
                    client.execute_command, "CLIENT", "PAUSE", int(pause_s * 1000), "ALL"
                )
                await asyncio.sleep(pause_s)
                if until() or time.monotonic() - began >= cap_s:
                    return
                pause_s = 0.25
        finally:
            client.close()


async def _hold(seconds: float, until: Callable[[], bool], cap_s: float) -> None:
    """At least ``seconds``, then until ``until()`` (a renewal seen to fail: on a loaded
    machine the heartbeat may not have tried in the first second), at most ``cap_s``."""
    began = time.monotonic()
    await asyncio.sleep(seconds)
    while not until() and time.monotonic() - began < cap_s:
        await asyncio.sleep(0.05)


@pytest.fixture(params=["sqlite-locked", pytest.param("redis-paused", marks=pytest.mark.redis)])
def store_trouble(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    if request.param == "sqlite-locked":
        yield SqliteLocked(tmp_path)
    else:
        yield RedisPaused(request.getfixturevalue("redis_factory")().url)


def _store_is_sound(rt: fx.Runtime, outside: Outside) -> None:
    """The crash checker's verdict (DESIGN §5), from the store and the tool's effects."""
    summary = read(rt, lambda v: check_store(v, now=time.time(), at_rest=True))
    assert summary.violations == ()
    assert read(rt, lambda v: check_effects(v, outside.effects)) == []


def _renewal_failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the outage left in the log: renewals that failed, or (Redis) the store resending
    a renewal whose answer it lost, both with their cause."""
    return [
        r.getMessage()
        for r in caplog.records
        if (
            r.name == "fxdurable.worker" and "lease renewal for session s1 failed" in r.getMessage()
        )
        or (r.name == "fxdurable.store" and "resending the commit" in r.getMessage())
    ]


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("fxdurable") and r.exc_info]


# -- outages shorter and longer than the lease --------------------------------------------------


@dataclass
class Aftermath:
    settled: fx.SubmissionRecord
    task: ToolTaskRecord
    lease_token: int  # how many claims the session saw
    store_back_at: float  # on time.monotonic()


def _through_outage(
    trouble: Any,
    outside: Outside,
    outage_s: float,
    caplog: pytest.LogCaptureFixture,
    cap_s: float,
) -> Aftermath:
    """Worker one starts the turn; with its unsafe call in flight, worker two starts and the
    store goes away for ``outage_s``. Once the turn settles, the crash suite's invariants are
    checked and the logs read: each failed renewal was logged with its cause, no traceback."""
    agent = outside.agent()

    async def main() -> Aftermath:
        settings = trouble.settings
        async with fx.Runtime([agent], store=trouble.store(), settings=settings) as first:
            sub = await first.session(SESSION).submit("ship v2")
            await asyncio.wait_for(outside.started.wait(), 10)
            async with fx.Runtime([agent], store=trouble.store(), settings=settings) as second:
                # Held until a renewal failed (what the tests check), at most cap_s: the
                # short outage still ends well before the heartbeat gives up (TTL - margin).
                await trouble.outage(outage_s, lambda: bool(_renewal_failures(caplog)), cap_s)
                back = time.monotonic()
                settled = await second.session(SESSION).wait(sub.id, timeout=20)
                await check_invariants(second, SESSION)
                _store_is_sound(second, outside)
                (task,) = tasks(second, sub.id)
                token = read(second, lambda v: v.get_session(SESSION)).lease.token
                return Aftermath(settled, task, token, back)

    with caplog.at_level(logging.WARNING, logger="fxdurable"):
        after = run(main(), timeout=60)
    assert _renewal_failures(caplog), "each failed renewal is logged, with its cause"
    assert _tracebacks(caplog) == []
    return after


@pytest.mark.slow
def test_an_outage_shorter_than_the_lease_is_ridden_out(store_trouble, caplog):
    """Renewal fails for several heartbeats, is retried, and succeeds once the store is back:
    the lease never expires, so nobody takes over and the tool runs once (before: the first
    failure ended renewal, the lease expired mid-tool, the other worker ran the turn on with
    the call ``outcome_unknown`` while the first still ran it)."""
    outside = Outside(hold_s=SETTINGS.lease_ttl_s + 1.5)  # outlives an unrenewed lease
    after = _through_outage(store_trouble, outside, SHORT_OUTAGE_S, caplog, SHORT_OUTAGE_CAP_S)
    assert (after.settled.status.value, after.settled.result) == ("completed", "done")
    assert (after.settled.interruptions, after.settled.attempts) == (0, 1)
    assert (after.task.status.value, after.task.runs) == ("completed", 1)
    assert after.lease_token == 1  # claimed once: nobody took over
    assert len(outside.effects) == 1 and outside.cancelled == []


@pytest.mark.slow
def test_an_outage_longer_than_the_lease_stops_the_first_worker_before_it_expires(
    store_trouble, caplog
):
    """No renewal can succeed before the lease expires: the first worker cancels its run
    (the tool call in flight with it) before another worker may claim the session. Another
    worker recovers the turn once the store is back: the unsafe call is ``outcome_unknown``
    and the model is told; it never runs twice (before: the first worker's tool ran on to its
    end beside the second worker's run)."""
    outside = Outside(hold_s=30)
    after = _through_outage(store_trouble, outside, LONG_OUTAGE_S, caplog, LONG_OUTAGE_S)
    assert len(outside.cancelled) == 1, "the first worker's run was stopped"
    assert outside.cancelled[0] < after.store_back_at, "... while the store was still away"
    stopped = [r for r in caplog.records if "could not be renewed before it expires" in r.message]
    assert stopped and "s1" in stopped[0].getMessage()
    assert (after.settled.status.value, after.settled.result) == ("completed", "done")
    assert after.settled.interruptions == 1
    assert (after.task.status.value, after.task.runs) == ("outcome_unknown", 1)
    assert after.lease_token == 2  # exactly one takeover
    assert len(outside.effects) == 1 and outside.finished == []


# -- release on every exit that is not a crash --------------------------------------------------


def test_an_unexpected_error_out_of_a_turn_releases_the_lease_at_once(tmp_path, caplog):
    """A hook's bug escapes the turn. Before: the lease stayed held until it expired (here
    after ten minutes), so the session's next wake did nothing. Now it is released as the
    error leaves, the error is still logged, and the next wake recovers the turn."""
    hook_calls: list[str] = []

    async def before_tool(tool: str, arguments: str) -> str | None:
        hook_calls.append(tool)
        if len(hook_calls) == 1:
            raise RuntimeError("a bug in the permission hook")
        return None

    outside = Outside(hold_s=0)
    agent = outside.agent()
    agent = fx.Agent("eng", agent.model, tools=agent.tools, before_tool=before_tool)
    # A TTL far beyond the test and no scan: only a release lets the next wake run.
    settings = fx.WorkerSettings(heartbeat_s=0.05, lease_ttl_s=600, scan_interval_s=600)

    async def main():
        async with fx.Runtime(
            [agent], store=owned_store(db_url(tmp_path)), settings=settings
        ) as rt:
            s = rt.session(SESSION)
            sub = await s.submit("ship v2")
            await _until(lambda: bool(hook_calls))
            await _until(lambda: read(rt, lambda v: v.get_session(SESSION)).lease.owner is None)
            assert submission(rt, sub.id).status.value == "running"  # not settled: released
            await s.resume()
            settled = await s.wait(sub.id, timeout=5)
            assert (settled.status.value, settled.result) == ("completed", "done")
            assert settled.interruptions == 1  # the attempt the error cut short
            (task,) = tasks(rt, sub.id)
            assert (task.status.value, task.runs) == ("completed", 1)
            await check_invariants(rt, SESSION)
            _store_is_sound(rt, outside)

    with caplog.at_level(logging.WARNING, logger="fxdurable"):
        run(main())
    logged = [r for r in caplog.records if r.exc_info and "permission hook" in str(r.exc_info[1])]
    assert logged, "the error itself is still reported, with its traceback"


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "never happened"
        await asyncio.sleep(0.01)
