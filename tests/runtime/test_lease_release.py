"""A run keeps its lease until the tool code it left running has ended (docs/leases.md).

In one process, on SQLite: a blocking unsafe tool outlives its ``timeout_s`` (it waits on a
gate the test opens). The turn records the call and settles, but the run keeps the lease,
renewed, while the tool's thread runs: a second submission of the session waits, and runs
once the thread has taken its effect, so its check sees it. If the store goes away meanwhile,
the lease is not released (it is not the run's any more) and the guard escalates at the stop
deadline, as for any run that cannot renew. The processes are in
``tests/workers/test_lease_release_effects.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import pydantic
from fxrt_support import at_rest, db_url, owned_store, read, run, submission

import fxdurable as fx
from fxdurable.core.records import SubmissionRecord
from fxdurable.runtime.leases import LostLease

SETTINGS = fx.WorkerSettings(
    heartbeat_s=0.2, lease_ttl_s=2.0, lease_margin_s=0.4, scan_interval_s=0.2
)
# For a test that needs the lease kept, not lost: renewals every 0.2 s with 9 s of room
# before the margin, so a busy machine's slow fsyncs do not end the run (1.6 s of them
# lapsed a 2 s lease in one CI run, and over 3 s a 4 s one in another, on a loaded 2-core
# machine; the runtime then exits loudly, as it must, which is the store-outage tests' case).
# The room costs the test nothing: it waits for renewals, never for an expiry.
KEPT = fx.WorkerSettings(heartbeat_s=0.2, lease_ttl_s=10.0, lease_margin_s=1.0, scan_interval_s=0.2)


class Op(pydantic.BaseModel):
    op: str = "a"


class World:
    """A deploy whose thread outlives its ``timeout_s`` until ``gate`` opens, and a check."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.effects: list[str] = []
        self.cancelled_seen: list[bool] = []  # ctx.cancelled as the late thread saw it

        @fx.tool(replay="unsafe", timeout_s=0.2)
        def deploy(inp: Op, ctx: fx.ToolContext) -> str:
            "Deploy (blocking; not safe to repeat)."
            self.started.set()
            assert self.gate.wait(20)
            self.cancelled_seen.append(ctx.cancelled.is_set())
            self.effects.append(ctx.execution_id)
            return "deployed"

        @fx.tool
        def check(inp: Op, ctx: fx.ToolContext) -> str:
            "How many times it took effect."
            return f"{len(self.effects)} effect(s)"

        def policy(request: fx.ModelRequest) -> fx.ModelResponse:
            prompt = next(m.text for m in reversed(request.messages) if m.role == "user")
            last = request.messages[-1]
            if last.role == "user":
                return fx.reply("on it", fx.call("check" if prompt == "ensure" else "deploy"))
            if last.text.startswith("0 "):
                return fx.reply("absent: deploying", fx.call("deploy"))
            return fx.reply(f"result: {last.text}")

        self.agent = fx.Agent("a", fx.ScriptedModel(policy), tools=[deploy, check])


async def _settled(rt: fx.Runtime, sub_id: str) -> SubmissionRecord:
    while (sub := submission(rt, sub_id)).status in ("queued", "running"):
        await asyncio.sleep(0.01)
    return sub


async def _renewed_past(rt: fx.Runtime, expires_at: float) -> float:
    """The lease's expiry once a renewal moved it past ``expires_at``: still held, renewed."""
    while True:
        lease = read(rt, lambda v: v.get_session("s")).lease  # type: ignore[union-attr]
        assert lease.owner is not None, "the lease was let go while the tool still ran"
        if lease.expires_at > expires_at:
            return float(lease.expires_at)
        await asyncio.sleep(0.01)


def test_a_call_past_its_timeout_keeps_the_lease_renewed_until_its_thread_ends(
    tmp_path: Any,
) -> None:
    w = World()

    async def main() -> tuple[SubmissionRecord, SubmissionRecord]:
        async with fx.Runtime([w.agent], store=owned_store(db_url(tmp_path)), settings=KEPT) as rt:
            first = await rt.session("s").submit("deploy")
            settled = await _settled(rt, first.id)
            assert "timed out" in (settled.result_text or ""), settled
            lease = read(rt, lambda v: v.get_session("s")).lease  # type: ignore[union-attr]
            assert lease.owner is not None
            second = await rt.session("s").submit("ensure")
            # Two renewals later the lease is still held and the second turn has not run.
            await _renewed_past(rt, await _renewed_past(rt, lease.expires_at))
            assert submission(rt, second.id).status == "queued"
            assert w.effects == []
            w.gate.set()
            done = await _settled(rt, second.id)
            await at_rest(rt, "s")
            return settled, done

    first, second = run(main(), timeout=30)
    assert first.status == "completed"
    assert second.status == "completed" and second.result_text == "result: 1 effect(s)"
    assert len(w.effects) == 1
    assert w.cancelled_seen == [True]  # the timeout told the thread to stop


def test_a_store_away_while_the_lease_is_kept_escalates_and_nothing_is_released(
    tmp_path: Any,
) -> None:
    w = World()
    path = tmp_path / "fx.db"
    url = db_url(tmp_path) + "&busy_timeout_ms=50"
    lost: list[LostLease] = []

    def on_lost_lease(what: LostLease) -> None:
        lost.append(what)
        w.gate.set()  # the embedder's own stop: the tool's call ends now

    async def main() -> None:
        async with fx.Runtime(
            [w.agent], store=owned_store(url), settings=SETTINGS, on_lost_lease=on_lost_lease
        ) as rt:
            first = await rt.session("s").submit("deploy")
            await _settled(rt, first.id)
            held = read(rt, lambda v: v.get_session("s")).lease  # type: ignore[union-attr]
            other = sqlite3.connect(path, isolation_level=None, timeout=10)
            try:
                other.execute("BEGIN EXCLUSIVE")  # the store is away: renewals fail
                assert await asyncio.to_thread(w.gate.wait, 10)
            finally:
                other.execute("ROLLBACK")
                other.close()
            after = read(rt, lambda v: v.get_session("s")).lease  # type: ignore[union-attr]
            # Not released: the lease it could not renew was left to expire.
            assert after.owner == held.owner and after.token == held.token

    run(main(), timeout=30)
    (what,) = lost
    assert what.session_id == "s" and what.executing == ("deploy",)
    assert 0 < what.expires_in_s <= SETTINGS.margin_s
    assert len(w.effects) == 1
