"""The crash harness (DESIGN §5): real processes, SIGKILLed at named points, then checked.

Imported by ``conftest.py`` (which puts this directory on ``sys.path``) and the crash tests.

``run_to_rest`` starts ``driver.py`` as a subprocess (``FXD_CRASH_AT`` set for a crash run,
removed otherwise) and returns ``(returncode, stdout, stderr)``. The :class:`CrashHarness`
fixture ``crash`` strings runs together: each crash run must die by SIGKILL *at its point*
(a crash point that never fires means the path was not exercised), then a clean run must reach
rest, then every invariant is checked from the store and the effect logs, then a ``--next`` run
must complete a follow-up message, and the invariants are checked again.

The store is a fixture parametrised by backend (``store_url`` in ``conftest.py``): a Redis or
DynamoDB crash suite adds a param (and its setup/teardown) and reuses every test unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fxdurable.core.records import (
    AttemptRecord,
    EventRecord,
    ModelCallRecord,
    SubmissionRecord,
    ToolTaskRecord,
)
from fxdurable.stores import open_store
from fxdurable.testing import Effect, Violation, check_effects, check_store
from fxdurable.testing.invariants import StoreSummary

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().with_name("driver.py")
SESSION = "s"
STORY_REQUEST = "crash-1"
DONE_TEXT = "Done: order 42 charged and release 2.0 deployed."  # the story's normal end
NEXT_REQUEST = "crash-next"
SETTLED = ("completed", "failed", "aborted")
PROCESS_TIMEOUT_S = 60.0
# Small enough that the story needs several invocations (the driver makes each tool take a
# little time in this scenario), large enough that every invocation makes progress.
CONTINUATION_BUDGET_S = 0.05

T = TypeVar("T")


def clean_env(crash_at: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FXD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_COLOR"] = "1"
    if crash_at is not None:
        env["FXD_CRASH_AT"] = crash_at
    return env


def run_process(
    argv: Sequence[str], *, crash_at: str | None = None, timeout: float = PROCESS_TIMEOUT_S
) -> tuple[int, str, str]:
    """Run one real process; a hang is a test failure, with whatever it printed."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=REPO,
            env=clean_env(crash_at),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"{' '.join(argv)} (FXD_CRASH_AT={crash_at}) still running after {timeout:g}s\n"
            f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}"
        )
    return done.returncode, done.stdout, done.stderr


def run_to_rest(
    store_url: str,
    workdir: Path,
    crash_at: str | None = None,
    scenario: str = "story",
    *,
    follow_up: bool = False,
    invocation_budget: float | None = None,
    max_attempts: int | None = None,
    hostname: str | None = None,
    timeout: float = PROCESS_TIMEOUT_S,
    provider: str = "inprocess",
    partial_every: float | None = None,
    extra_args: Sequence[str] = (),
) -> tuple[int, str, str]:
    """Start the driver and let it run until its session rests (or the crash point kills it).

    ``provider`` ``openai`` / ``anthropic`` serves the scripted model over HTTP in that wire
    format (the real httpx + SSE client); ``extra_args`` go to the driver as they are."""
    argv = [
        sys.executable,
        str(DRIVER),
        "--store",
        store_url,
        "--dir",
        str(workdir),
        "--scenario",
        scenario,
        "--timeout",
        str(timeout - 10),
    ]
    if invocation_budget is None and scenario == "continuation":
        invocation_budget = CONTINUATION_BUDGET_S
    if invocation_budget is not None:
        argv += ["--invocation-budget", str(invocation_budget)]
    if max_attempts is not None:
        argv += ["--max-attempts", str(max_attempts)]
    if hostname is not None:
        argv += ["--hostname", hostname]
    if provider != "inprocess":
        argv += ["--provider", provider]
    if partial_every is not None:
        argv += ["--partial-every", str(partial_every)]
    argv += list(extra_args)
    if follow_up:
        argv.append("--next")
    return run_process(argv, crash_at=crash_at, timeout=timeout)


def assert_crashed(result: tuple[int, str, str], spec: str) -> None:
    """The process died by SIGKILL at exactly ``spec``: not a bug, not a clean exit."""
    code, out, err = result
    assert code == -signal.SIGKILL and f"crash injected at {spec}" in err, (
        f"expected a SIGKILL at {spec} (the crash point must fire), got returncode {code}\n"
        f"stdout:\n{out}\nstderr:\n{err}"
    )


def assert_clean(result: tuple[int, str, str], what: str) -> None:
    code, out, err = result
    assert code == 0, f"{what}: returncode {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "crash injected" not in err, err
    assert "Traceback" not in err, f"{what} logged an exception:\n{err}"


# -- what the store and the outside world say ------------------------------------------------


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@dataclass
class World:
    """One at-rest snapshot: the session's records, the checker's verdicts, the effect logs."""

    summary: StoreSummary
    effect_violations: list[Violation]
    submissions: list[SubmissionRecord]
    attempts: dict[str, list[AttemptRecord]]
    model_calls: dict[str, list[ModelCallRecord]]
    tasks: list[ToolTaskRecord]
    events: list[EventRecord]
    effects: list[Effect]
    calls: list[tuple[str, str, int]]  # (tool, execution id, run) per execution
    ledger: list[str]
    hooks: list[str]
    model_requests: list[str]  # "story r0", ... one per request the model served
    outputs: list[str] = field(default_factory=list)

    def submission(self, request_id: str = STORY_REQUEST) -> SubmissionRecord:
        (sub,) = [s for s in self.submissions if s.request_id == request_id]
        return sub

    def tasks_of(self, tool: str, request_id: str = STORY_REQUEST) -> list[ToolTaskRecord]:
        turn = self.submission(request_id).id
        return [t for t in self.tasks if t.tool == tool and t.turn_id == turn]

    def task(self, tool: str, request_id: str = STORY_REQUEST) -> ToolTaskRecord:
        (task,) = self.tasks_of(tool, request_id)
        return task

    def effects_of(self, tool: str) -> list[str]:
        return [e.execution_id for e in self.effects if e.tool == tool]

    def calls_of(self, tool: str) -> list[tuple[str, int]]:
        return [(eid, run) for name, eid, run in self.calls if name == tool]

    def task_events(self, task: ToolTaskRecord, type_: str | None = None) -> list[EventRecord]:
        return [
            e
            for e in self.events
            if e.data.get("task") == task.id and (type_ is None or e.type == type_)
        ]


def read_world(store_url: str, workdir: Path) -> World:
    effects = []
    for line in read_lines(workdir / "effects.log"):
        tool, execution = line.split()
        effects.append(Effect(tool, execution))
    calls = []
    for line in read_lines(workdir / "calls.log"):
        tool, execution, run = line.split()
        calls.append((tool, execution, int(run)))

    def body(view: Any) -> World:
        subs = list(view.submissions(SESSION))
        return World(
            summary=check_store(view, now=time.time(), at_rest=True),
            effect_violations=check_effects(view, effects),
            submissions=subs,
            attempts={s.id: list(view.attempts(s.id)) for s in subs},
            model_calls={s.id: list(view.model_calls(s.id)) for s in subs},
            tasks=list(view.session_tool_tasks(SESSION)),
            events=list(view.events(SESSION)),
            effects=effects,
            calls=calls,
            ledger=read_lines(workdir / "ledger.txt"),
            hooks=read_lines(workdir / "hooks.log"),
            model_requests=read_lines(workdir / "model.log"),
        )

    store = open_store(store_url)
    try:
        return store.read(body)
    finally:
        store.close()


def assert_invariants(world: World, request_ids: Sequence[str]) -> None:
    """DESIGN §5, from the database and the log of external effects."""
    problems = [str(v) for v in world.summary.violations]
    problems += [str(v) for v in world.effect_violations]
    assert not problems, "invariant violations:\n" + "\n".join(problems)
    assert world.summary.sessions == 1

    # Each unsafe effect at most once; each idempotent effect once per execution id.
    tasks_by_execution = {t.execution_id: t for t in world.tasks}
    for (tool, execution_id), n in Counter((e.tool, e.execution_id) for e in world.effects).items():
        task = tasks_by_execution.get(execution_id)
        assert task is not None and task.tool == tool, f"{tool} {execution_id}: no such task"
        assert n == 1, f"{tool} took effect {n} times for execution {execution_id}"
    assert len(world.effects_of("deploy")) <= 1, f"deployed more than once: {world.effects}"
    assert len(world.ledger) == len(set(world.ledger)), f"ledger repeats: {world.ledger}"
    assert sorted(world.ledger) == sorted(world.effects_of("charge"))

    # Each request id exactly one submission; each submission exactly one terminal outcome.
    by_request = Counter(s.request_id for s in world.submissions)
    assert by_request == Counter(request_ids), f"submissions per request id: {by_request}"
    for sub in world.submissions:
        assert sub.status in SETTLED, f"{sub.request_id} is {sub.status} at rest"
        settles = [
            e.type
            for e in world.events
            if e.type.startswith("submission.")
            and e.type != "submission.admitted"
            and e.data.get("submission") == sub.id
        ]
        assert settles == [f"submission.{sub.status}"], f"{sub.request_id} settled as {settles}"
        assert not [a for a in world.attempts[sub.id] if a.status == "running"]

    # No task left running (or pending); each outcome_unknown with its event.
    for task in world.tasks:
        assert task.status not in ("running", "pending"), f"{task.id} left {task.status}"
        if task.status == "outcome_unknown":
            assert world.task_events(task, "tool.outcome_unknown"), f"{task.id} has no event"

    # The session's event sequence has no gaps; it is at rest with its lease free.
    assert [e.seq for e in world.events] == list(range(1, len(world.events) + 1))


def assert_model_requests(world: World, *, again: Sequence[str] = ()) -> None:
    """Each recorded model response was requested once: recovery served it from the record.

    ``again`` names the requests a crash cut off before they were recorded (asked twice).
    """
    counts = Counter(world.model_requests)
    recorded = {
        f"{'next' if s.request_id == NEXT_REQUEST else 'story'} r{c.round}"
        for s in world.submissions
        for c in world.model_calls[s.id]
    }
    assert set(counts) == recorded, f"requested {counts}, recorded {sorted(recorded)}"
    expected = {key: 1 + list(again).count(key) for key in counts}
    assert dict(counts) == expected, f"model requests {dict(counts)}, expected {expected}"


class CrashHarness:
    """Crash, recover, check, follow up: the shape of every crash test."""

    def __init__(
        self,
        store_url: str,
        workdir: Path,
        *,
        invocation_budget: float | None = None,
        max_attempts: int | None = None,
        timeout: float = PROCESS_TIMEOUT_S,
        provider: str = "inprocess",
        partial_every: float | None = None,
    ) -> None:
        self.store_url = store_url
        self.workdir = workdir
        # Passed to every run of the driver (the agent and runtime must be the same each time).
        self.invocation_budget = invocation_budget
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.provider = provider  # the model boundary: "inprocess", "openai", "anthropic"
        self.partial_every = partial_every
        self.outputs: list[str] = []

    def run(
        self,
        crash_at: str | None = None,
        scenario: str = "story",
        *,
        follow_up: bool = False,
        hostname: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> tuple[int, str, str]:
        result = run_to_rest(
            self.store_url,
            self.workdir,
            crash_at,
            scenario,
            follow_up=follow_up,
            invocation_budget=self.invocation_budget,
            max_attempts=self.max_attempts,
            hostname=hostname,
            timeout=self.timeout,
            provider=self.provider,
            partial_every=self.partial_every,
            extra_args=extra_args,
        )
        self.outputs.append(result[1])
        return result

    def crash(self, spec: str, scenario: str = "story") -> None:
        assert_crashed(self.run(spec, scenario), spec)

    def recover(self, scenario: str = "story") -> World:
        assert_clean(self.run(None, scenario), "the run to rest")
        world = self.world()
        assert_invariants(world, [STORY_REQUEST])
        return world

    def follow_up(self, scenario: str = "story") -> World:
        """The session accepts a next message and completes it."""
        assert_clean(self.run(None, scenario, follow_up=True), "the follow-up run")
        world = self.world()
        assert_invariants(world, [STORY_REQUEST, NEXT_REQUEST])
        nxt = world.submission(NEXT_REQUEST)
        assert nxt.status == "completed", nxt
        assert (nxt.result_text or "").startswith("Status: "), nxt.result_text
        assert world.task("read_state", NEXT_REQUEST).status == "completed"
        return world

    def crash_and_recover(self, *specs: str, scenario: str = "story") -> World:
        """SIGKILL at each of ``specs`` in turn, run to rest, check, follow up.

        Returns the at-rest world from before the follow-up, for the policy's own checks.
        """
        for spec in specs:
            self.crash(spec, scenario)
        world = self.recover(scenario)
        self.follow_up(scenario)
        return world

    def world(self) -> World:
        world = read_world(self.store_url, self.workdir)
        world.outputs = list(self.outputs)
        return world

    def read(self, body: Callable[[Any], T]) -> T:
        store = open_store(self.store_url)
        try:
            return store.read(body)
        finally:
            store.close()
