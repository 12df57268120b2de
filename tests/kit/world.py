"""The world at rest, as every crash suite reads and checks it (DESIGN §5).

:func:`read_world` takes one snapshot of every session in a store and of the story's outside
world (:mod:`tests.kit.story`); :func:`assert_invariants` and :func:`assert_model_requests`
check it, on top of ``fxdurable.testing.check_store`` / ``check_effects``. Read it only with
every process that runs turns stopped or idle: at rest.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fxdurable.backends import open_store
from fxdurable.core.fork import is_fork_copy
from fxdurable.core.records import (
    AttemptRecord,
    EventRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
)
from fxdurable.testing import Effect, Violation, check_effects, check_store
from fxdurable.testing.invariants import StoreSummary
from tests.kit.story import (
    SKIPPED,
    STORY_REQUEST,
    UNKNOWN_MARK,
    batched_text,
    is_story,
    read_lines,
)

SETTLED = ("completed", "failed", "aborted")
# The terminal outcomes (the submission.interrupted advisory before a failure is not one).
SETTLE_EVENTS = tuple(f"submission.{outcome}" for outcome in SETTLED)

T = TypeVar("T")


def read_store(store_url: str, body: Callable[[Any], T]) -> T:
    """``body(view)`` in one read of the store at ``store_url``."""
    store = open_store(store_url)
    try:
        return store.read(body)
    finally:
        store.close()


@dataclass
class World:
    """One snapshot of every session in the store, and of the outside world's logs."""

    summary: StoreSummary
    effect_violations: list[Violation]
    sessions: dict[str, SessionRecord]
    submissions: list[SubmissionRecord]
    attempts: dict[str, list[AttemptRecord]]
    model_calls: dict[str, list[ModelCallRecord]]
    tasks: list[ToolTaskRecord]
    events: list[EventRecord]  # session by session, each in order
    effects: list[Effect]  # the charges (from the ledger), then the deploys
    calls: list[tuple[str, str, int, int]]  # (tool, execution id, run, pid) per execution
    ledger: list[str]
    hooks: list[str]
    model_requests: list[tuple[str, int, int]]  # (prompt, round, pid) per request served
    outputs: list[str] = field(default_factory=list)  # what the runs printed, if the suite keeps it

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
        return [e.execution_id for e in self.effects if e.tool == tool and not e.noop]

    def calls_of(self, tool: str) -> list[tuple[str, int]]:
        return [(eid, run) for name, eid, run, _pid in self.calls if name == tool]

    def session_events(self, session_id: str) -> list[EventRecord]:
        return [e for e in self.events if e.session_id == session_id]

    def events_of(self, type_: str, session_id: str | None = None) -> list[EventRecord]:
        events = self.events if session_id is None else self.session_events(session_id)
        return [e for e in events if e.type == type_]

    def task_events(self, task: ToolTaskRecord, type_: str | None = None) -> list[EventRecord]:
        return [
            e
            for e in self.session_events(task.session_id)
            if e.data.get("task") == task.id and (type_ is None or e.type == type_)
        ]

    def attempt_pids(self, request_id: str = STORY_REQUEST) -> list[int]:
        """The pid of the process that ran each attempt (an attempt's worker is host:pid)."""
        sub = self.submission(request_id)
        return [int(a.worker.rsplit(":", 1)[1]) for a in self.attempts[sub.id]]


def read_world(store_url: str, world_dir: Path) -> World:
    ledger = read_lines(world_dir / "ledger.txt")
    effects = [Effect("charge", key) for key in ledger]
    for line in read_lines(world_dir / "effects.log"):
        tool, execution, *step = line.split()  # a durable tool's effects name their step
        if step == [SKIPPED]:  # a guarded call that took no effect on purpose
            effects.append(Effect(tool, execution, noop=True))
        else:
            effects.append(Effect(tool, execution, step[0] if step else None))
    calls = []
    for line in read_lines(world_dir / "calls.log"):
        tool, execution, run, pid = line.split()
        calls.append((tool, execution, int(run), int(pid)))
    requests = []
    for line in read_lines(world_dir / "model.log"):
        prompt, round_, pid = json.loads(line)
        requests.append((str(prompt), int(round_), int(pid)))

    def body(view: Any) -> World:
        sessions = {s.id: s for s in view.list_sessions()}
        subs = [sub for sid in sessions for sub in view.submissions(sid)]
        return World(
            summary=check_store(view, now=time.time(), at_rest=True),
            effect_violations=check_effects(view, effects),
            sessions=sessions,
            submissions=subs,
            attempts={s.id: list(view.attempts(s.id)) for s in subs},
            model_calls={s.id: list(view.model_calls(s.id)) for s in subs},
            tasks=[t for sid in sessions for t in view.session_tool_tasks(sid)],
            events=[e for sid in sessions for e in view.events(sid)],
            effects=effects,
            calls=calls,
            ledger=ledger,
            hooks=read_lines(world_dir / "hooks.log"),
            model_requests=requests,
        )

    return read_store(store_url, body)


def assert_invariants(
    world: World, request_ids: Iterable[str], *, sessions: int | None = None
) -> None:
    """DESIGN §5, from the store and the outside world, at rest. ``sessions``: how many
    sessions the store must hold (any number when ``None``)."""
    problems = [str(v) for v in world.summary.violations]
    problems += [str(v) for v in world.effect_violations]
    assert not problems, "invariant violations:\n" + "\n".join(problems)
    if sessions is not None:
        assert world.summary.sessions == sessions, world.summary

    # Each effect by a task of its tool, once per execution id: so each idempotency key in
    # the ledger belongs to a charge task and is charged once (the ledger has no repeats).
    # A fork's copy shares its original's execution id (the same execution): the original
    # is the task that ran.
    tasks_by_execution = {
        t.execution_id: t for t in world.tasks if not is_fork_copy(t.turn_id, t.session_id)
    }
    # A durable tool's effects: once per step of its execution.
    effect_keys = Counter((e.tool, e.execution_id, e.step) for e in world.effects)
    for (tool, execution_id, step), n in effect_keys.items():
        task = tasks_by_execution.get(execution_id)
        assert task is not None and task.tool == tool, f"{tool} {execution_id}: no such task"
        assert n == 1, f"{tool} {step or ''} took effect {n} times for execution {execution_id}"
    # The unsafe deploy: at most once per story turn, never in any other turn.
    deploys = Counter(tasks_by_execution[e].turn_id for e in world.effects_of("deploy"))
    for sub in world.submissions:
        allowed = 1 if is_story(sub.prompt) else 0
        assert deploys[sub.id] <= allowed, f"{sub.request_id} deployed {deploys[sub.id]} times"

    # Each request id exactly one submission; each submission exactly one terminal outcome.
    by_request = Counter(s.request_id for s in world.submissions)
    assert by_request == Counter(request_ids), f"submissions per request id: {by_request}"
    for sub in world.submissions:
        assert sub.status in SETTLED, f"{sub.request_id} is {sub.status} at rest"
        settles = [
            e.type
            for e in world.session_events(sub.session_id)
            if e.type in SETTLE_EVENTS and e.data.get("submission") == sub.id
        ]
        assert settles == [f"submission.{sub.status}"], f"{sub.request_id} settled as {settles}"
        assert not [a for a in world.attempts[sub.id] if a.status == "running"]

    # No task left running or pending; each outcome_unknown with its event (a fork's copy
    # has it in its source session, where the call ran).
    for task in world.tasks:
        assert task.status not in ("running", "pending"), f"{task.id} left {task.status}"
        if task.status == "outcome_unknown" and not is_fork_copy(task.turn_id, task.session_id):
            assert world.task_events(task, "tool.outcome_unknown"), f"{task.id} has no event"

    for session_id, session in world.sessions.items():
        # Gap-free events, the session at rest with its lease let go.
        seqs = [e.seq for e in world.session_events(session_id)]
        assert seqs == list(range(1, len(seqs) + 1)), f"{session_id}: event seqs {seqs}"
        assert session.status == "idle", f"{session_id} is {session.status} at rest"
        # A SIGKILL between the settling commit and the release leaves an idle session's
        # lease to expire: nothing is left to wake it, and an expired lease is free to claim.
        free = session.lease.owner is None or session.lease.expires_at <= time.time()
        assert free, f"{session_id} still leased: {session.lease}"
        # Per-session order: turns started in admission order, one after the other.
        subs = sorted(
            (s for s in world.submissions if s.session_id == session_id), key=lambda s: s.seq
        )
        started = [e.turn_id for e in world.events_of("turn.started", session_id)]
        assert started == [s.id for s in subs if world.attempts[s.id]], (
            f"{session_id}: turns started in order {started}, admitted {[s.id for s in subs]}"
        )
        for before, after in itertools.pairwise(subs):
            if before.settled_at is not None and after.started_at is not None:
                assert before.settled_at <= after.started_at, (
                    f"{after.request_id} started before {before.request_id} settled"
                )


def assert_model_requests(world: World, *, again: Sequence[tuple[str, int]] = ()) -> None:
    """The journal never forked: each recorded (prompt, round) was requested from the model
    once, so recovery served it from the record.

    ``again`` names the (prompt, round) requests a crash cut off before they were recorded
    (asked twice).
    """
    counts = Counter((prompt, round_) for prompt, round_, _pid in world.model_requests)
    recorded = {(s.prompt, c.round) for s in world.submissions for c in world.model_calls[s.id]}
    assert set(counts) == recorded, f"requested {sorted(counts)}, recorded {sorted(recorded)}"
    expected = {key: 1 + list(again).count(key) for key in counts}
    assert dict(counts) == expected, f"model requests {dict(counts)}, expected {expected}"


def assert_deploy_killed_after_progress(world: World, request_id: str = STORY_REQUEST) -> None:
    """``tool.after-progress:deploy``: the process died mid-deploy, its progress durable. The
    unsafe call settles by its policy (outcome_unknown, never re-run, the model inspects), and
    its progress did not survive as its result: the result is the unknown-outcome message."""
    sub = world.submission(request_id)
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.interruptions == 1, sub
    deploy = world.task("deploy", request_id)
    assert (deploy.status, deploy.runs) == ("outcome_unknown", 1), deploy
    assert (deploy.progress, deploy.progress_at) == (None, None), deploy
    assert UNKNOWN_MARK in (deploy.result or "") and "deploying" not in (deploy.result or "")
    assert len(world.calls_of("deploy")) == 1  # entered once, never re-executed
    deploys = len(world.effects_of("deploy"))  # 0 or 1: the kill raced the deploy's effect
    assert deploys <= 1
    check = world.task("check_deploy", request_id)
    assert check.result == f"{deploys} deploy(s) on record"
    assert not [e for e in world.events if "progress" in e.type]


def assert_batch_recovered(
    world: World, request_id: str = STORY_REQUEST, *, read_recorded: bool = True
) -> None:
    """``batch crash`` killed with every intent of its batch recorded: survey and reserve were
    running and, with ``read_recorded`` (a kill at ``tool.after-record:read_state``),
    read_state's result was recorded; else (``tool.batch.running``) read_state was running
    too. A recorded result stands (read_state ran once); every running call re-ran by its
    policy (reserve with the same execution id, its effect once); the final answer quotes the
    results in the order the model asked for them."""
    sub = world.submission(request_id)
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == batched_text("crash")  # the results in asked order
    assert sub.interruptions == 1
    survey, read, reserve = (world.task(t, request_id) for t in ("survey", "read_state", "reserve"))
    assert [t.index for t in (survey, read, reserve)] == [0, 1, 2]
    rerun = [survey, reserve] if read_recorded else [survey, read, reserve]
    if read_recorded:  # the recorded result stands: read_state ran once, in the crashed process
        assert (read.status, read.runs) == ("completed", 1), read
        assert world.calls_of("read_state") == [(read.execution_id, 1)]
    # The running calls were started by the crashed process, then re-run by their policies.
    for task in rerun:
        assert (task.status, task.runs) == ("completed", 2), task
        reasons = [e.data.get("reason") for e in world.task_events(task, "tool.started")]
        assert reasons == [None, "recovery"]
        # Its function had started or not when the kill came (a thread starting it may lose
        # the race with the kill); it ran once after.
        calls = world.calls_of(task.tool)
        assert calls in ([(task.execution_id, 2)], [(task.execution_id, 1), (task.execution_id, 2)])
    assert world.effects_of("reserve") == [reserve.execution_id]  # once, same key
    # The crash came after every intent of the batch (and read_state's result, if recorded).
    tool_events = [
        (e.type, e.data["index"], e.data.get("reason"))
        for e in world.session_events(sub.session_id)
        if e.turn_id == sub.id and e.type.startswith("tool.")
    ]
    first = [("tool.started", i, None) for i in range(3)]
    if read_recorded:
        first.append(("tool.completed", 1, None))
    assert tool_events[: len(first)] == first, tool_events
    assert tool_events[len(first)][2] == "recovery", tool_events  # the next is recovery's
    assert not [t for t in world.tasks if t.status == "outcome_unknown"]
    assert_model_requests(world)
