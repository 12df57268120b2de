"""Tool calls retried on transient errors (``define_tool(..., retry=fx.Retry(...))``): the
same execution runs again after a backoff, each failed run recorded; an unsafe tool only on
the errors it names. The runtime's sleep is injected: the backoff's delays are recorded, not
waited out."""

from __future__ import annotations

import asyncio
import random
import threading

import pydantic
import pytest
from fxrt_support import FAST, check_invariants, events, fresh_store, run, tasks

import fxdurable as fx
from fxdurable.errors import ToolOutcomeUnknownError
from fxdurable.runtime.tool_retry import Retry


class Order(pydantic.BaseModel):
    name: str


def fails_first(
    runs: list[str], *, failures: list[BaseException], replay: fx.ReplayPolicy, retry: Retry
) -> fx.Tool:
    """``fetch``: raises the next of ``failures`` on each run while any are left, then
    answers; ``runs`` gets the execution id of every run."""

    def fetch(inp: Order, ctx: fx.ToolContext) -> str:
        runs.append(ctx.execution_id)
        ctx.state[f"run{len(runs)}"] = True  # a failed run's writes must not survive it
        if failures:
            raise failures.pop(0)
        return f"fetched {inp.name}"

    return fx.define_tool(
        "fetch", description="Fetch.", input_model=Order, execute=fetch, replay=replay, retry=retry
    )


def run_turn(tmp_path, tool: fx.Tool) -> tuple[fx.Submission, list, list, list[float]]:
    """One turn calling ``tool`` once: the submission, its task, its events, the waits."""
    model = fx.ScriptedModel([fx.reply("", fx.call(tool.name, name="a")), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=[tool])
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, sleep=sleep, rng=random.Random(7)
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            settled = await s.wait(sub.id, timeout=10)
            await check_invariants(rt, "s1")
            state = (await s.record()).state  # type: ignore[union-attr]
            return settled, tasks(rt, sub.id), events(rt, "s1"), state

    settled, task_list, evs, state = run(main())
    return settled, task_list, evs, waits, state


def test_a_safe_tool_runs_again_in_the_same_execution_until_it_answers(tmp_path):
    runs: list[str] = []
    retry = Retry(attempts=3, backoff_s=1.0, max_backoff_s=30.0)
    tool = fails_first(
        runs, failures=[TimeoutError("slow"), ConnectionError("reset")], replay="safe", retry=retry
    )
    settled, (task,), evs, waits, state = run_turn(tmp_path, tool)
    assert settled.result == "done"
    assert (task.status.value, task.result) == ("completed", "fetched a")
    assert len(runs) == 3 and len(set(runs)) == 1 == len({task.execution_id} | set(runs))
    retrying = [e.data for e in evs if e.type == "tool.retrying"]
    assert [(d["failed_runs"], d["error"]) for d in retrying] == [
        (1, "TimeoutError: slow"),
        (2, "ConnectionError: reset"),
    ]
    assert [d["delay_s"] for d in retrying] == waits
    # Full jitter over half the ceiling: 1 s, then 2 s.
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0
    assert dict(state) == {"run3": True}, "only the run that answered wrote"


def test_the_last_error_fails_the_call_once_the_attempts_are_spent(tmp_path):
    runs: list[str] = []
    failures: list[BaseException] = [ConnectionError(f"reset {i}") for i in range(5)]
    tool = fails_first(runs, failures=failures, replay="idempotent", retry=Retry(attempts=2))
    _, (task,), evs, waits, _ = run_turn(tmp_path, tool)
    assert (task.status.value, task.result) == ("failed", "ConnectionError: reset 1")
    assert len(runs) == 2 and len(waits) == 1
    assert [e.data["failed_runs"] for e in evs if e.type == "tool.retrying"] == [1]


def test_an_unsafe_tool_retries_only_the_errors_it_names(tmp_path):
    runs: list[str] = []
    retry = Retry(attempts=5, on=(ConnectionRefusedError,))
    failures: list[BaseException] = [ConnectionRefusedError("refused"), RuntimeError("half done")]
    tool = fails_first(runs, failures=failures, replay="unsafe", retry=retry)
    _, (task,), evs, _, _ = run_turn(tmp_path, tool)
    # Refused: the effect did not happen, so it ran again; then an error it did not name.
    assert (task.status.value, task.result) == ("failed", "RuntimeError: half done")
    assert len(runs) == 2
    assert [e.data["error"] for e in evs if e.type == "tool.retrying"] == [
        "ConnectionRefusedError: refused"
    ]


def test_an_unsafe_tool_must_name_the_errors_it_retries():
    with pytest.raises(fx.ConfigurationError, match="unsafe tool retries only on errors"):
        fails_first([], failures=[], replay="unsafe", retry=Retry())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"attempts": 1}, "at least 2"),
        ({"backoff_s": 5.0, "max_backoff_s": 1.0}, "between 0 and max_backoff_s"),
        ({"on": ()}, "Exception classes"),
        ({"on": (KeyboardInterrupt,)}, "Exception classes"),
    ],
)
def test_a_retry_that_cannot_work_is_refused(kwargs, match):
    with pytest.raises(fx.ConfigurationError, match=match):
        Retry(**kwargs)


def test_a_durable_tool_retries_inside_its_steps_not_around_them():
    async def provision(inp: Order, ctx: fx.ToolContext) -> str:
        return "never run"

    with pytest.raises(fx.ConfigurationError, match="retry inside the step"):
        fx.define_tool(
            "provision",
            description="Provision.",
            input_model=Order,
            execute=provision,
            durable=True,
            retry=Retry(on=(ConnectionError,)),
        )


def test_the_runtimes_own_errors_are_never_retried(tmp_path):
    runs: list[str] = []
    failure = ToolOutcomeUnknownError("the server went away mid-call")
    tool = fails_first(runs, failures=[failure], replay="safe", retry=Retry(attempts=3))
    _, (task,), evs, waits, _ = run_turn(tmp_path, tool)
    assert len(runs) == 1 and waits == []
    assert task.status.value == "cancelled"  # a safe call cut short: cancelled, not retried
    assert not [e for e in evs if e.type == "tool.retrying"]


def test_an_abort_during_the_backoff_ends_the_call(tmp_path):
    started = threading.Event()
    runs: list[str] = []

    async def fetch(inp: Order, ctx: fx.ToolContext) -> str:
        runs.append(ctx.execution_id)
        raise ConnectionError("reset")

    tool = fx.define_tool(
        "fetch",
        description="Fetch.",
        input_model=Order,
        execute=fetch,
        retry=Retry(attempts=3, backoff_s=1.0),
    )
    model = fx.ScriptedModel([fx.reply("", fx.call("fetch", name="a")), fx.reply("done")])
    agent = fx.Agent("eng", model, tools=[tool])

    async def held_sleep(seconds: float) -> None:
        started.set()
        await asyncio.Event().wait()  # a backoff that only an abort ends

    async def main():
        async with fx.Runtime(
            [agent], store=fresh_store(tmp_path), settings=FAST, sleep=held_sleep
        ) as rt:
            s = rt.session("s1")
            sub = await s.submit("go")
            await asyncio.to_thread(started.wait, 5)
            await s.abort()
            settled = await s.wait(sub.id, timeout=10)
            assert settled.status.value == "aborted"
            (task,) = tasks(rt, sub.id)
            assert task.status.value == "cancelled" and len(runs) == 1
            await check_invariants(rt, "s1")

    run(main())
