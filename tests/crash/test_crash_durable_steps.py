"""Durable multi-step tools under real SIGKILLs (DESIGN §5), on the embedded runtime.

The driver's ``provision`` scenario asks for one call of the story's durable ``provision``
tool: step ``tenant`` (looks the tenant up before creating it), then step ``dns`` (does not
look: only its record keeps it from running twice). The process is killed inside the first
step (``tool.step.before-record``: its function ran, its record is not committed) and between
the two steps (``tool.step.after-record``), restarted, run to rest; the shared invariants are
checked, then a next message completes. Either way the call is re-executed, never
``outcome_unknown``, and each step's effect happened exactly once.

The ``provision-overquota`` scenario's ``tenant`` step raises once (the quota frees up after), and
the tool takes its ``fallback`` step instead: killed once the failure is recorded, recovery
raises it again and takes the fallback (the tenant step does not run again, though it would
now succeed); killed before, the tenant step runs again and succeeds, and no fallback runs.
One branch's effects, never both (AWS durable conformance scenario 1-10).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crash_harness import CrashHarness

from tests.kit.story import provisioned_text, read_lines
from tests.kit.world import World, assert_model_requests

pytestmark = pytest.mark.crash

SCENARIO = "provision"


def assert_provisioned_once(world: World, workdir: Path, *, tenant_runs: int) -> None:
    sub = world.submission()
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == provisioned_text("crash")
    assert sub.interruptions == 1
    task = world.task("provision")
    assert task.status == "completed" and task.runs == 2, task
    assert task.result == "tenant t-crash at crash.example.com"
    assert [(s.name, s.run) for s in task.steps] == [("tenant", tenant_runs), ("dns", 2)]
    assert [e.data.get("reason") for e in world.task_events(task, "tool.started")] == [
        None,
        "recovery",
    ]
    assert not world.task_events(task, "tool.outcome_unknown")
    effects = [(e.execution_id, e.step) for e in world.effects if e.tool == "provision"]
    assert effects == [(task.execution_id, "tenant"), (task.execution_id, "dns")]
    assert read_lines(workdir / "tenants.txt") == ["crash"]
    assert [run for _, run in world.calls_of("provision")] == [1, 2]
    assert [run for _, run in world.calls_of("provision.dns")] == [2]
    assert_model_requests(world)


def test_a_crash_between_two_steps_replays_the_first(crash: CrashHarness) -> None:
    world = crash.crash_and_recover("tool.step.after-record:provision", scenario=SCENARIO)
    assert_provisioned_once(world, crash.workdir, tenant_runs=1)
    # The recorded tenant step was replayed: its function ran in the first process only.
    assert [run for _, run in world.calls_of("provision.tenant")] == [1]


def test_a_crash_inside_a_step_runs_that_step_again(crash: CrashHarness) -> None:
    world = crash.crash_and_recover("tool.step.before-record:provision", scenario=SCENARIO)
    assert_provisioned_once(world, crash.workdir, tenant_runs=2)
    # At least once: the step ran again, and its own check kept the effect single.
    assert [run for _, run in world.calls_of("provision.tenant")] == [1, 2]


def _provision_effects(world: World) -> list[str]:
    task = world.task("provision")
    return [
        e.step
        for e in world.effects
        if e.tool == "provision" and e.execution_id == task.execution_id
    ]


def test_a_crash_after_a_failed_step_was_recorded_takes_the_fallback_again(
    crash: CrashHarness,
) -> None:
    world = crash.crash_and_recover(
        "tool.step.after-record:provision", scenario="provision-overquota"
    )
    assert world.submission().status == "completed"
    task = world.task("provision")
    assert task.status == "completed" and task.runs == 2, task
    assert task.result == "tenant shared-overquota at overquota.example.com"
    assert [(s.name, s.run, s.error is not None) for s in task.steps] == [
        ("tenant", 1, True),
        ("fallback", 2, False),
        ("dns", 2, False),
    ]
    assert _provision_effects(world) == ["fallback", "dns"]
    assert [run for _, run in world.calls_of("provision.tenant")] == [1], "replayed, not re-run"
    assert read_lines(crash.workdir / "tenants.txt") == []


def test_a_crash_before_a_failed_step_was_recorded_runs_it_again(crash: CrashHarness) -> None:
    world = crash.crash_and_recover(
        "tool.step.before-record:provision", scenario="provision-overquota"
    )
    task = world.task("provision")
    assert task.result == "tenant t-overquota at overquota.example.com"
    assert [(s.name, s.error) for s in task.steps] == [("tenant", None), ("dns", None)]
    assert _provision_effects(world) == ["tenant", "dns"]
    assert [run for _, run in world.calls_of("provision.tenant")] == [1, 2]
    assert not world.calls_of("provision.fallback")
