"""Aborts and steers act now (docs/aborting.md), not at the next heartbeat.

Every runtime here beats every 30 s: a call the abort did not reach at once would hold the
turn far past each ``wait``'s timeout. A tool's gate is never released: it returns only by
being cancelled, which the tool itself observes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable

import pydantic
import pytest
import redis
from fxrt_support import check_invariants, db_url, event_types, events, fresh_store, run, tasks

import fxdurable as fx
from fxdurable.core.events import EventType
from fxdurable.runtime.decide import unknown_message
from fxdurable.runtime.models import OpenAIModel
from fxdurable.stores.redis import RedisStore
from fxdurable.testing.model_server import Quirks, ScriptedModelServer

# A heartbeat that never comes within a test: only the interrupt path can stop a call.
SLOW_BEAT = fx.WorkerSettings(heartbeat_s=30, lease_ttl_s=90, scan_interval_s=600)
LONG = "".join(f"word{i:03d} " for i in range(125))  # 1,000 characters


class Job(pydantic.BaseModel):
    name: str


def _calling(tool: fx.Tool) -> fx.ScriptedModel:
    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if any(m.role == "tool" for m in request.messages) or "after" in request.messages[-1].text:
            return fx.reply("done")
        return fx.reply("", fx.call(tool.name, name="x"))

    return fx.ScriptedModel(policy)


async def _abort_once_started(
    rt: fx.Runtime, started: Callable[[], Awaitable[object]]
) -> tuple[fx.SessionHandle, str]:
    """Submit a job, wait until its tool runs, abort: the session and the submission's id."""
    s = rt.session("s1")
    sub = await s.submit("job")
    await asyncio.wait_for(started(), 5)
    await s.abort()
    return s, sub.id


def test_an_abort_cancels_a_long_async_tool_at_once(tmp_path):
    gate = asyncio.Event()  # never set
    started = asyncio.Event()
    seen: list[str] = []

    async def hold(inp: Job, ctx: fx.ToolContext) -> str:
        started.set()
        try:
            await gate.wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("released")
        return "released"

    tool = fx.define_tool("hold", description="holds", input_model=Job, execute=hold)
    model = _calling(tool)
    agent = fx.Agent("eng", model, tools=[tool])

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=SLOW_BEAT) as rt:
            s, sub_id = await _abort_once_started(rt, started.wait)
            settled = await s.wait(sub_id, timeout=5)  # the beat is 30 s away
            assert settled.status.value == "aborted"
            assert seen == ["cancelled"] and not gate.is_set()
            (task,) = tasks(rt, sub_id)
            assert task.status.value == "cancelled"
            assert event_types(rt, "s1").count("submission.aborted") == 1
            assert len(model.requests) == 1
            await check_invariants(rt, "s1")

    run(main())


def test_an_aborted_sync_unsafe_tool_is_unknown_and_the_model_is_told(tmp_path):
    gate = threading.Event()
    started = threading.Event()

    def charge(inp: Job, ctx: fx.ToolContext) -> str:
        started.set()
        gate.wait(30)  # released only once the abort's outcome is asserted
        return "charged"

    tool = fx.define_tool(
        "charge", description="charges", input_model=Job, execute=charge, replay="unsafe"
    )
    model = _calling(tool)
    agent = fx.Agent("eng", model, tools=[tool])

    async def main() -> None:
        async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=SLOW_BEAT) as rt:
            s, sub_id = await _abort_once_started(rt, lambda: asyncio.to_thread(started.wait, 5))
            try:
                settled = await s.wait(sub_id, timeout=5)
                assert settled.status.value == "aborted"
                (task,) = tasks(rt, sub_id)
                assert task.status.value == "outcome_unknown"
                assert unknown_message("charge") in (task.result or "")
                # Its thread still runs: the lease is held until it returns.
                record = await s.record()
                assert record is not None and record.lease is not None
            finally:
                gate.set()
            # The next turn's model reads the unknown outcome in the conversation.
            assert await s.run("after the abort", timeout=10) == "done"
            last = model.requests[-1]
            assert any(unknown_message("charge") in m.text for m in last.messages)
            await check_invariants(rt, "s1")

    run(main())


def test_a_steer_cuts_a_streaming_reply_and_the_turn_answers_it(tmp_path):
    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if any(m.text == "say hi instead" for m in request.messages):
            return fx.reply("hi")
        return fx.reply(LONG)

    # 100 events of 10 characters, 50 ms apart: the whole reply takes 5 s to stream.
    quirks = Quirks(text_chunk_chars=10, event_delay_s=0.05)
    with ScriptedModelServer(policy, quirks=quirks) as server:
        model = OpenAIModel("slow", api_key="k", base_url=server.openai_base_url)
        agent = fx.Agent("eng", model, durability=fx.Durability(partial_text_every_s=0.1))

        async def main() -> None:
            async with fx.Runtime([agent], store=fresh_store(tmp_path), settings=SLOW_BEAT) as rt:
                s = rt.session("s1")
                sub = await s.submit("write a lot")
                while not any(e.type == EventType.MODEL_PARTIAL for e in events(rt, "s1")):
                    await asyncio.sleep(0.02)  # waiting for a condition: the first partial
                steering = await s.steer("say hi instead")
                assert steering.steered
                settled = await s.wait(sub.id, timeout=5)
                assert settled.result == "hi"
                cut = [e for e in events(rt, "s1") if e.type == EventType.MODEL_INTERRUPTED]
                assert len(cut) == 1
                text = cut[0].data["text"]
                assert text and LONG.startswith(text) and len(text) < len(LONG)
                # The next request carries the cut reply, marked interrupted, then the steer.
                second = server.model_requests[-1]
                assert len(server.model_requests) == 2
                cut_entry = [m for m in second.messages if m.role == "assistant"]
                assert [m.text for m in cut_entry] == [text]
                assert second.messages[-1].text == "say hi instead"
                history = await s.history()
                assert any(m.interrupted and m.text == text for m in history)
                await check_invariants(rt, "s1")

        run(main())


# Records an abort from a process of its own. ``silent``: its push is lost (the store's
# notifier swapped for the polling one, which tells no other process).
ABORT_FROM_ANOTHER_PROCESS = """
import sys
from fxdurable.backends import open_store
from fxdurable.core.clock import SystemClock
from fxdurable.core.journal import Journal
from fxdurable.core.clock import RandomIds
from fxdurable.core.notify import Notifier
store = open_store(sys.argv[1])
if sys.argv[3:] == ["silent"]:
    type(store).notifier = lambda self: Notifier()
print(Journal(store, SystemClock(), RandomIds()).request_abort(sys.argv[2]))
"""


def _holding_agent(seen: list[str], started: asyncio.Event) -> fx.Agent:
    async def hold(inp: Job, ctx: fx.ToolContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    tool = fx.define_tool("hold", description="holds", input_model=Job, execute=hold)
    return fx.Agent("eng", _calling(tool), tools=[tool])


async def _abort_from_another_process(url: str, session_id: str, *, silent: bool = False) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", ABORT_FROM_ANOTHER_PROCESS, url, session_id]
        + (["silent"] if silent else []),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.system
def test_an_abort_from_another_process_lands_within_the_poll(tmp_path):
    """SQLite has no push: the holder polls while the call runs (every 150 ms)."""
    started = asyncio.Event()
    seen: list[str] = []
    agent = _holding_agent(seen, started)
    url = db_url(tmp_path)

    async def main() -> None:
        async with fx.Runtime([agent], store=url, settings=SLOW_BEAT) as rt:
            s = rt.session("s1")
            sub = await s.submit("job")
            await asyncio.wait_for(started.wait(), 5)
            assert sub.id in await _abort_from_another_process(url, "s1")
            settled = await s.wait(sub.id, timeout=5)
            assert settled.status.value == "aborted" and seen == ["cancelled"]
            await check_invariants(rt, "s1")

    run(main())


def _pg_listener_pids(url: str) -> list[int]:
    import psycopg

    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'fxdurable-interrupts'"
        ).fetchall()
    return [int(r[0]) for r in rows]


@dataclasses.dataclass(frozen=True)
class Pushing:
    """A store that pushes, and how to cut its subscriber's connection from outside."""

    open: Callable[[str], fx.Store]
    sever: Callable[[str], None]
    subscribers: Callable[[str, str], int]  # (url, channel) -> how many listen


def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.split("?", 1)[0])


def _redis_sever(url: str) -> None:
    # Every pub/sub client of this test's own server (one per pytest worker): the subscriber.
    _redis(url).client_kill_filter(_type="pubsub")


def _redis_subscribers(url: str, channel: str) -> int:
    ((_, count),) = _redis(url).pubsub_numsub(channel)
    return int(count)


def _pg_sever(url: str) -> None:
    import psycopg

    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
        for pid in _pg_listener_pids(url):
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _postgres(url: str) -> fx.Store:
    from fxdurable.stores.postgres import PostgresStore

    return PostgresStore(url)


PUSHING = {
    "redis": Pushing(RedisStore, _redis_sever, _redis_subscribers),
    "postgres": Pushing(_postgres, _pg_sever, lambda url, _channel: len(_pg_listener_pids(url))),
}


@pytest.mark.parametrize("case", ["listening", "after-a-reconnect", "pushed-while-away"])
@pytest.mark.parametrize("backend", list(PUSHING))
def test_an_abort_from_another_process_reaches_a_pushing_holder(backend, case, request):
    """Redis pub/sub and Postgres LISTEN/NOTIFY: with the watcher's fallback read a minute
    away, only the push can land the abort — also after the subscriber's connection was cut,
    and when the push itself was lost while it was cut (the resubscription reads for it)."""
    pushing = PUSHING[backend]
    url = request.getfixturevalue(f"{backend}_url")
    started = asyncio.Event()
    seen: list[str] = []
    agent = _holding_agent(seen, started)

    async def main() -> None:
        store = pushing.open(url)
        notifier = store.notifier()
        notifier.fallback_s = 60.0
        async with fx.Runtime([agent], store=store, settings=SLOW_BEAT) as rt:
            s = rt.session("s1")
            sub = await s.submit("job")
            await asyncio.wait_for(started.wait(), 5)
            assert await asyncio.to_thread(notifier.subscribed.wait, 5)
            if case == "after-a-reconnect":
                pushing.sever(url)
                while notifier.subscriptions < 2 or not notifier.subscribed.is_set():
                    await asyncio.sleep(0.02)  # waiting for a condition: the resubscription
            silent = case == "pushed-while-away"
            assert sub.id in await _abort_from_another_process(url, "s1", silent=silent)
            if silent:
                pushing.sever(url)  # the push was lost; only the resubscription reads for it
            settled = await s.wait(sub.id, timeout=5)
            assert settled.status.value == "aborted" and seen == ["cancelled"]
            await check_invariants(rt, "s1")
        store.close()
        assert pushing.subscribers(url, notifier.channel) == 0, "the subscriber outlived the store"

    run(main())


@pytest.mark.parametrize("backend", list(PUSHING))
def test_closing_a_pushing_store_ends_its_subscriber_at_once(backend, request):
    """``close`` interrupts the subscriber's wait (a push on a channel of its own) instead of
    waiting it out: with a 30 s receive the close still ends within 10 s, subscriber gone. A
    Redis store's close waited out each 0.5 s receive before, in every RQ horse (484 ms a
    job: bench/rq_job_phases.py)."""
    pushing = PUSHING[backend]
    url = request.getfixturevalue(f"{backend}_url")
    store = pushing.open(url)
    notifier = store.notifier()
    notifier.receive_s = 30.0
    notifier.opened("s1")
    assert notifier.subscribed.wait(5)
    closing = threading.Thread(target=store.close)
    closing.start()
    closing.join(timeout=10)  # a deadline a third of the receive: only the interrupt meets it
    assert not closing.is_alive(), "close waited out the subscriber's receive"
    assert pushing.subscribers(url, notifier.channel) == 0
