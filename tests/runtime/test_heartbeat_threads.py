"""The heartbeat's store calls run in threads of their own (fxdurable/runtime/crossing.py).

Before, a renewal shared the loop's default executor with every journal call and every sync
tool: a batch of sync tools as large as that pool (six threads on two cores), or a store
outage that left the pool's calls hanging, kept the renewal queued until the lease lapsed,
and the lease guard then ended the worker process with the tools still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import pydantic
from fxrt_support import check_invariants, db_url, owned_store, read, rounds_done, run, tasks

import fxdurable as fx
from fxdurable.runtime.crossing import APART_THREADS, durable_apart

# The tool below outlasts the TTL, so without a renewal the lease lapses while it runs. A
# heartbeat every 0.25 s and a 1 s margin leave a renewal ~2.7 s to land: one slow fsync on a
# loaded machine must not lapse the lease (a 1 s TTL with a 0.05 s margin did not allow it).
SETTINGS = fx.WorkerSettings(
    heartbeat_s=0.25, lease_ttl_s=4.0, lease_margin_s=1.0, scan_interval_s=0.1
)
HOLD_S = SETTINGS.lease_ttl_s + 1.5


def _one_thread_default_executor() -> ThreadPoolExecutor:
    """The loop's default executor, shrunk to one thread: what a batch of sync tools as
    large as the real pool leaves free (nothing), without running that many."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="default")
    asyncio.get_running_loop().set_default_executor(pool)
    return pool


class Build(pydantic.BaseModel):
    target: str


def test_a_sync_tool_holding_every_default_thread_does_not_starve_the_renewal(tmp_path):
    ran: list[str] = []
    release = threading.Event()

    @fx.tool(replay="unsafe")
    def build(inp: Build, ctx: fx.ToolContext) -> str:
        "Build a target (blocking, not safe to repeat)."
        ran.append(threading.current_thread().name)
        release.wait(HOLD_S)  # holds the only default thread past the lease's TTL
        return f"built {inp.target}"

    def policy(request: fx.ModelRequest) -> fx.ModelResponse:
        if rounds_done(request) == 0:
            return fx.reply("building", fx.call("build", target="app"))
        return fx.reply("done")

    agent = fx.Agent("eng", fx.ScriptedModel(policy), tools=[build])

    async def main() -> None:
        _one_thread_default_executor()
        async with fx.Runtime(
            [agent], store=owned_store(db_url(tmp_path)), settings=SETTINGS
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("build the app")
            settled = await s.wait(sub.id, timeout=HOLD_S + 10)
            assert (settled.status.value, settled.result) == ("completed", "done")
            assert (settled.interruptions, settled.attempts) == (0, 1)
            (task,) = tasks(rt, sub.id)
            assert (task.status.value, task.runs) == ("completed", 1)
            # Claimed once and renewed throughout: nobody took the session over.
            assert read(rt, lambda v: v.get_session("s1")).lease.token == 1
            await check_invariants(rt, "s1")

    run(main(), timeout=HOLD_S + 20)
    assert ran == ["default_0"], "the tool ran once, in the default executor"


def test_a_call_apart_runs_while_the_default_executor_is_held():
    held = threading.Event()
    release = threading.Event()

    async def main() -> str:
        _one_thread_default_executor()
        loop = asyncio.get_running_loop()
        holder = loop.run_in_executor(None, lambda: (held.set(), release.wait(10)))
        while not held.is_set():
            await asyncio.sleep(0.01)
        try:
            return await asyncio.wait_for(durable_apart(lambda: threading.current_thread().name), 5)
        finally:
            release.set()
            await holder

    assert run(main()).startswith("fxd-heartbeat")


def test_a_call_apart_returns_raises_and_carries_the_context():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")

    def fails() -> None:
        raise KeyError("gone")

    async def main() -> tuple[str, BaseException | None]:
        var.set("from the caller")
        got = await durable_apart(var.get)
        try:
            await durable_apart(fails)
        except KeyError as exc:
            return got, exc
        return got, None

    got, error = run(main())
    assert got == "from the caller"
    assert isinstance(error, KeyError)


def test_calls_apart_reuse_their_threads():
    """Beats reuse the pool's threads: a store that keeps a connection per thread (SQLite)
    opens at most ``APART_THREADS`` however many beats run, one after another or at once.
    (Not exactly one thread for sequential calls: the pool marks a thread idle only after
    the caller has its result, so the next call may start a second one.)"""

    async def one_after_another() -> set[int]:
        return {await durable_apart(threading.get_ident) for _ in range(200)}

    async def at_once() -> set[int]:
        started = threading.Barrier(APART_THREADS, timeout=10)

        def beat() -> int:
            # Hold every thread until the pool's limit is reached, so the rest must queue.
            with contextlib.suppress(threading.BrokenBarrierError):
                started.wait()
            return threading.get_ident()

        return set(await asyncio.gather(*(durable_apart(beat) for _ in range(3 * APART_THREADS))))

    assert len(run(one_after_another())) <= APART_THREADS
    assert len(run(at_once())) == APART_THREADS


def test_a_caller_that_stops_waiting_abandons_the_call():
    """A renewal the heartbeat gave up on finishes in its thread; its result is dropped and
    the loop goes on (the store's hanging call cannot hold the beat)."""
    release = threading.Event()
    finished = threading.Event()

    def hangs() -> str:
        release.wait(10)
        finished.set()
        return "late"

    async def main() -> None:
        try:
            await asyncio.wait_for(durable_apart(hangs), 0.1)
        except TimeoutError:
            pass
        else:
            raise AssertionError("the call should have been abandoned")
        assert not finished.is_set()
        release.set()
        assert await durable_apart(lambda: "next") == "next"

    run(main())
    assert finished.wait(5), "the abandoned call still finished in its thread"
