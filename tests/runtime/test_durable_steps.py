"""Durable multi-step tools (``@fx.tool(durable=True)`` with ``ctx.step``): each step's value
is recorded once on the running task; a call re-executed after a crash replays its completed
steps instead of being left ``outcome_unknown``. A deploy that no longer declares the tool, or
no longer marks it durable, falls back to the unknown-outcome path.

Crashes are simulated as in ``test_replay_policies.py`` (the journal driven as a dead worker
would have left it); the real SIGKILLs are in ``tests/crash/test_crash_durable_steps.py`` and
the RQ crash suite.
"""

from __future__ import annotations

import dataclasses
import io
import time
from typing import Any

import pydantic
import pytest
from fxrt_support import (
    FAST,
    Crashed,
    check_invariants,
    db_url,
    events,
    leave_crashed_turn,
    owned_store,
    read,
    run,
    tasks,
    tool_messages,
)

import fxdurable as fx
from fxdurable.cli.render import Style, describe
from fxdurable.core.journal import Fence, Journal
from fxdurable.errors import IllegalTransitionError
from fxdurable.runtime.decide import unknown_message
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing import Effect, check_effects, check_store


class Tenant(pydantic.BaseModel):
    name: str


def provisioning(
    log: list[str], *, durable: bool = True, replay: fx.ReplayPolicy | None = None
) -> fx.Tool:
    """``provision_workspace``: creates a tenant (sync step), then its DNS (async step)."""

    async def provision_workspace(inp: Tenant, ctx: fx.ToolContext) -> str:
        def create_tenant() -> dict[str, Any]:
            log.append(f"tenant {inp.name}")
            return {"id": f"t-{inp.name}", "tags": ("a", "b")}

        async def create_dns() -> str:
            log.append(f"dns {inp.name}")
            return f"{inp.name}.example.com"

        tenant = await ctx.step("tenant", create_tenant)
        host = await ctx.step("dns", create_dns)
        return f"tenant {tenant['id']} tags {tenant['tags']} at {host}"

    return fx.define_tool(
        "provision_workspace",
        description="Create a tenant and its DNS name.",
        input_model=Tenant,
        execute=provision_workspace,
        durable=durable,
        replay=replay,
    )


def run_one(url: str, tool: fx.Tool, final: str = "provisioned") -> tuple[Any, list[Any], Any]:
    model = fx.ScriptedModel([fx.reply("on it", fx.call(tool.name, name="acme")), fx.reply(final)])
    agent = fx.Agent("ops", model, tools=[tool])

    async def main() -> tuple[Any, list[Any], Any]:
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            session = rt.session("s1")
            sub = await session.submit("provision acme")
            done = await session.wait(sub.id, timeout=10)
            await check_invariants(rt, "s1")
            assert not check_store_now(rt)
            return done, tasks(rt, sub.id), events(rt, "s1")

    return run(main())


def check_store_now(rt: fx.Runtime) -> list[str]:
    summary = read(rt, lambda v: check_store(v, now=time.time(), at_rest=True))
    return [str(v) for v in summary.violations]


def test_each_step_is_recorded_once_with_its_json_value(tmp_path: Any) -> None:
    log: list[str] = []
    sub, (task,), evs = run_one(db_url(tmp_path), provisioning(log))
    assert sub.status.value == "completed"
    traced = [describe(e, Style(io.StringIO())) for e in evs if e.type == "tool.step"]
    assert traced == [
        "tool provision_workspace r0.t0 step tenant recorded",
        "tool provision_workspace r0.t0 step dns recorded",
    ]
    assert log == ["tenant acme", "dns acme"]
    assert task.status.value == "completed" and task.durable and task.policy == "unsafe"
    assert [(s.name, s.value, s.run) for s in task.steps] == [
        ("tenant", '{"id":"t-acme","tags":["a","b"]}', 1),
        ("dns", '"acme.example.com"', 1),
    ]
    # The first run returns the value as a replay would: through JSON (the tuple is a list).
    assert task.result == "tenant t-acme tags ['a', 'b'] at acme.example.com"
    steps = [e.data for e in evs if e.type == "tool.step"]
    assert [(d["step"], d["run"], d["task"]) for d in steps] == [
        ("tenant", 1, task.id),
        ("dns", 1, task.id),
    ]


def crash_between_steps(
    url: str, *, steps: dict[str, str], durable_run: bool = True, policy: str = "unsafe"
) -> Crashed:
    """A worker ran ``provision_workspace`` (durable) and recorded ``steps``, then died."""

    def midway(journal: Journal, fence: Fence) -> None:
        (task,) = journal.read(lambda v: v.tool_tasks(v.submissions("s1")[0].id))
        journal.start_tool(fence, task.id, durable=durable_run)
        for name, value in steps.items():
            journal.record_step(fence, task.id, name=name, value=value)

    return leave_crashed_turn(
        url,
        agent="ops",
        calls=[fx.call("provision_workspace", name="acme")],
        policies=[policy],
        after=midway,
    )


def recover(url: str, crashed: Crashed, tool: fx.Tool | None) -> tuple[Any, Any, Any, Any]:
    model = fx.ScriptedModel([fx.reply("unused"), fx.reply("provisioned")])
    agent = fx.Agent("ops", model, tools=[tool] if tool else [])

    async def main() -> tuple[Any, Any, Any, Any]:
        async with fx.Runtime([agent], store=owned_store(url), settings=FAST) as rt:
            sub = await rt.session("s1").wait(crashed.submission.id, timeout=10)
            await check_invariants(rt, "s1")
            assert not check_store_now(rt)
            (task,) = tasks(rt, sub.id)
            return sub, task, events(rt, "s1"), model

    return run(main())


def test_recovery_replays_the_completed_steps_and_runs_the_rest(tmp_path: Any) -> None:
    url = db_url(tmp_path)
    crashed = crash_between_steps(url, steps={"tenant": '{"id":"t-old","tags":[]}'})
    log: list[str] = []
    sub, task, evs, model = recover(url, crashed, provisioning(log))
    assert sub.status.value == "completed" and sub.interruptions == 1
    assert log == ["dns acme"], "the recorded tenant step must not run again"
    assert task.status.value == "completed" and task.runs == 2
    assert task.result == "tenant t-old tags [] at acme.example.com"
    assert [(s.name, s.run) for s in task.steps] == [("tenant", 1), ("dns", 2)]
    started = [e.data["reason"] for e in evs if e.type == "tool.started"]
    assert started == [None, "recovery"]
    assert not [e for e in evs if e.type == "tool.outcome_unknown"]
    assert tool_messages(model.requests[0])[0].text == task.result


def test_a_call_whose_every_step_was_recorded_runs_none_again(tmp_path: Any) -> None:
    url = db_url(tmp_path)
    recorded = {"tenant": '{"id":"t-old","tags":[]}', "dns": '"old.example.com"'}
    crashed = crash_between_steps(url, steps=recorded)
    log: list[str] = []
    _, task, _, _ = recover(url, crashed, provisioning(log))
    assert log == []
    assert task.status.value == "completed"
    assert task.result == "tenant t-old tags [] at old.example.com"


@pytest.mark.parametrize("redeploy", ["not durable", "not declared"])
def test_a_redeploy_without_the_durable_tool_leaves_the_call_unknown(
    tmp_path: Any, redeploy: str
) -> None:
    url = db_url(tmp_path)
    crashed = crash_between_steps(url, steps={"tenant": '{"id":"t-old","tags":[]}'})
    log: list[str] = []
    tool = provisioning(log, durable=False, replay="unsafe") if redeploy == "not durable" else None
    sub, task, evs, _ = recover(url, crashed, tool)
    assert sub.status.value == "completed"
    assert log == []
    assert task.status.value == "outcome_unknown" and task.runs == 1
    assert task.result == unknown_message("provision_workspace")
    assert [s.name for s in task.steps] == ["tenant"]  # kept, for the operator
    assert [e for e in evs if e.type == "tool.outcome_unknown"]


def test_a_call_first_run_before_it_was_durable_stays_unknown(tmp_path: Any) -> None:
    """Its first run recorded no steps: re-running it now could repeat what that run did."""
    url = db_url(tmp_path)
    crashed = crash_between_steps(url, steps={}, durable_run=False)
    log: list[str] = []
    _, task, _, _ = recover(url, crashed, provisioning(log))
    assert log == [] and task.status.value == "outcome_unknown" and not task.durable


def test_an_idempotent_call_made_durable_since_its_crash_records_steps_from_now_on(
    tmp_path: Any,
) -> None:
    """Its policy re-runs it anyway; the tool is durable now, so this run records its steps."""
    url = db_url(tmp_path)
    crashed = crash_between_steps(url, steps={}, durable_run=False, policy="idempotent")
    log: list[str] = []
    _, task, _, _ = recover(url, crashed, provisioning(log, replay="idempotent"))
    assert log == ["tenant acme", "dns acme"]
    assert task.status.value == "completed" and task.durable
    assert [(s.name, s.run) for s in task.steps] == [("tenant", 2), ("dns", 2)]


def failing_tool(execute: Any, *, durable: bool = True) -> fx.Tool:
    return fx.define_tool(
        "provision_workspace",
        description="x",
        input_model=Tenant,
        execute=execute,
        durable=durable,
    )


def test_a_repeated_step_name_fails_the_call(tmp_path: Any) -> None:
    log: list[str] = []

    async def twice(inp: Tenant, ctx: fx.ToolContext) -> str:
        await ctx.step("dns", lambda: log.append("first") or 1)
        await ctx.step("dns", lambda: log.append("second") or 2)
        return "unreachable"

    sub, (task,), _ = run_one(db_url(tmp_path), failing_tool(twice), final="it failed")
    assert sub.status.value == "completed"
    assert task.status.value == "failed"
    assert "StepError" in (task.result or "") and "'dns' ran twice" in (task.result or "")
    assert log == ["first"]
    assert [s.name for s in task.steps] == ["dns"]


def test_a_step_value_that_is_not_json_fails_the_call(tmp_path: Any) -> None:
    async def opaque(inp: Tenant, ctx: fx.ToolContext) -> str:
        await ctx.step("handle", lambda: object())
        return "unreachable"

    _, (task,), _ = run_one(db_url(tmp_path), failing_tool(opaque), final="it failed")
    assert task.status.value == "failed" and not task.steps
    assert "step 'handle' returned a object, which is not JSON" in (task.result or "")


def test_ctx_step_needs_a_durable_tool(tmp_path: Any) -> None:
    async def plain(inp: Tenant, ctx: fx.ToolContext) -> str:
        await ctx.step("x", lambda: 1)
        return "unreachable"

    _, (task,), _ = run_one(db_url(tmp_path), failing_tool(plain, durable=False), final="no")
    assert task.status.value == "failed" and not task.durable
    assert "ctx.step needs a durable tool" in (task.result or "")


def test_durable_tool_definitions() -> None:
    assert provisioning([]).replay == "unsafe"  # the fallback if durability is dropped
    assert provisioning([], replay="idempotent").replay == "idempotent"
    assert failing_tool(lambda i, c: "", durable=False).replay == "safe"
    with pytest.raises(fx.ConfigurationError, match="async def"):
        failing_tool(lambda i, c: "")

    async def fine(inp: Tenant, ctx: fx.ToolContext) -> str:
        return ""

    with pytest.raises(fx.ConfigurationError, match="reuse=False"):
        fx.define_tool(
            "x",
            description="x",
            input_model=Tenant,
            execute=fine,
            durable=True,
            reuse=False,
            replay="safe",
        )

    @fx.tool(durable=True)
    async def provision(inp: Tenant, ctx: fx.ToolContext) -> str:
        "Provision."
        return ""

    assert provision.durable and provision.replay == "unsafe"


def test_the_journal_records_a_step_once_and_only_on_a_running_durable_call(
    tmp_path: Any,
) -> None:
    url = db_url(tmp_path)
    refused: list[str] = []

    def misuse(journal: Journal, fence: Fence) -> None:
        (task,) = journal.read(lambda v: v.tool_tasks(v.submissions("s1")[0].id))
        for attempt in ("pending", "not durable"):
            try:
                journal.record_step(fence, task.id, name="a", value="1")
            except IllegalTransitionError as exc:
                refused.append(str(exc))
            if attempt == "pending":
                journal.start_tool(fence, task.id)  # not durable

    leave_crashed_turn(
        url,
        agent="ops",
        calls=[fx.call("provision_workspace", name="acme")],
        policies=["unsafe"],
        after=misuse,
    )
    assert len(refused) == 2, refused

    def twice(journal: Journal, fence: Fence) -> None:
        (task,) = journal.read(lambda v: v.tool_tasks(v.submissions("s2")[0].id))
        journal.start_tool(fence, task.id, durable=True)
        journal.record_step(fence, task.id, name="a", value="1")
        with pytest.raises(IllegalTransitionError, match="recorded twice"):
            journal.record_step(fence, task.id, name="a", value="2")

    leave_crashed_turn(
        url,
        agent="ops",
        session_id="s2",
        calls=[fx.call("provision_workspace", name="acme")],
        policies=["unsafe"],
        after=twice,
    )


def test_step_effects_are_checked_per_step(tmp_path: Any) -> None:
    """``check_effects``: a durable call's effects are its steps', each at most once."""
    log: list[str] = []
    url = db_url(tmp_path)
    run_one(url, provisioning(log))
    store = SqliteStore(url)
    try:
        (task,) = store.read(lambda v: v.session_tool_tasks("s1"))
        once = [Effect(task.tool, task.execution_id, step) for step in ("tenant", "dns")]
        assert store.read(lambda v: check_effects(v, once)) == []
        twice = [*once, Effect(task.tool, task.execution_id, "tenant")]
        (violation,) = store.read(lambda v: check_effects(v, twice))
        assert violation.code == "step-effect-repeated"
    finally:
        store.close()


def test_the_checker_flags_steps_that_break_their_invariants(tmp_path: Any) -> None:
    """``check_store`` (and so ``fxdurable check``): steps only on a durable call, each name
    once, each with one ``tool.step`` event. The records are forged past the journal, which
    refuses to write any of these."""
    url = db_url(tmp_path)
    log: list[str] = []
    run_one(url, provisioning(log))
    store = SqliteStore(url)
    try:
        (task,) = store.read(lambda v: v.session_tool_tasks("s1"))
        tenant = task.steps[0]
        forged = dataclasses.replace(
            task, durable=False, steps=(*task.steps, tenant), version=task.version + 1
        )
        store.transact(lambda tx: tx.put_tool_task(forged, expected_version=task.version))
        summary = store.read(lambda v: check_store(v, now=time.time(), at_rest=True))
        found = sorted((v.code, v.detail.split(": ")[-1]) for v in summary.violations)
        assert [code for code, _ in found] == [
            "step-name-repeated",
            "step-recorded-not-once",
            "steps-on-non-durable-task",
        ], found
        assert "2 records, 1 tool.step events" in found[1][1]
    finally:
        store.close()
