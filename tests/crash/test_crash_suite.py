"""The crash suite (DESIGN §5): the definition of done.

Each test starts ``tests/crash/driver.py`` as a real process with ``FXD_CRASH_AT`` set, requires
it to die by SIGKILL at exactly that point, runs it again until the session rests, checks every
invariant from the store and the log of external effects, then sends a follow-up message that
must complete. On top of the shared invariants each case asserts what its replay policy
promises (DESIGN §3.5, §4).

Crash points covered here, on the embedded runtime (SQLite store, in-process queue):
``submission.after-admit``, ``model.before-request``, ``model.mid-stream``,
``model.after-finish``, ``tool.after-intent`` and ``tool.after-execute`` (for a safe, an
idempotent and an unsafe tool), ``tool.after-record``, ``turn.in-commit``,
``continuation.before-enqueue``, ``continuation.after-enqueue``, ``recovery.after-claim``,
``hook.before-tool``, ``abort.after-intent`` (with a safe and with an unsafe tool in flight).
Beyond one point at a time: two crashes in a row, recovery by a process on another host
(lease expiry + periodic scan), a message admitted while a crashed turn awaits recovery, the
attempt budget exhausted by crashes, every invocation making progress under a tiny
invocation budget, and the real ``fxdurable demo`` CLI walk-through.

``steer.after-record`` is covered through the HTTP server, where steering arrives from a
client: ``tests/http/test_http_crash.py`` (with ``submission.after-admit``,
``tool.after-execute`` and SIGKILLs at random moments). Not applicable yet (fxdurable has no
subagents, so nothing can reach it): ``subagent.in-child``.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from crash_harness import CrashHarness, assert_clean, assert_crashed, run_process

from fxdurable.runtime.history import conversation
from fxdurable.runtime.models.base import INTERRUPTED_NOTE
from tests.kit.story import (
    DONE_TEXT,
    NEXT_REQUEST,
    OPENING,
    SESSION,
    STORY,
    STORY_REQUEST,
    UNKNOWN_MARK,
    read_lines,
)
from tests.kit.world import (
    World,
    assert_deploy_killed_after_progress,
    assert_invariants,
    assert_model_requests,
)

pytestmark = pytest.mark.crash


# -- what each replay policy promises ---------------------------------------------------------


def assert_story_completed(world: World, *, interruptions: int) -> None:
    """The story ran to its normal end: one charge, one deploy, nothing unknown."""
    sub = world.submission()
    assert sub.status == "completed", (sub.status, sub.error)
    assert sub.result_text == DONE_TEXT
    assert sub.interruptions == interruptions, sub
    for tool in ("read_state", "charge", "deploy"):
        assert world.task(tool).status == "completed", world.task(tool)
    assert not world.tasks_of("check_deploy")
    assert world.effects_of("charge") == [world.task("charge").execution_id]
    assert world.effects_of("deploy") == [world.task("deploy").execution_id]


def started_reasons(world: World, tool: str) -> list[object]:
    return [e.data.get("reason") for e in world.task_events(world.task(tool), "tool.started")]


def assert_unknown_deploy(world: World, *, deploys: int, interruptions: int | None = 1) -> None:
    """Unsafe: never re-executed; recorded outcome_unknown; the model is told and inspects."""
    sub = world.submission()
    assert sub.status == "completed", (sub.status, sub.error)
    if interruptions is not None:
        assert sub.interruptions == interruptions, sub
    deploy = world.task("deploy")  # exactly one deploy task: the model did not repeat it
    assert deploy.status == "outcome_unknown"
    assert deploy.runs == 1, "an unsafe call is never re-executed automatically"
    assert UNKNOWN_MARK in (deploy.result or "")
    assert world.task_events(deploy, "tool.outcome_unknown")
    assert len(world.effects_of("deploy")) == deploys
    assert len(world.calls_of("deploy")) == deploys
    # The model was told: a later model call exists and it inspected instead of deploying.
    later = [c for c in world.model_calls[sub.id] if c.round > deploy.round]
    assert later, "no model call after the unknown deploy"
    assert [c.name for c in later[0].tool_calls] == ["check_deploy"]
    check = world.task("check_deploy")
    assert check.status == "completed"
    assert check.round == deploy.round + 1
    assert check.result == f"{deploys} deploy(s) on record"
    assert "will not deploy again" in (sub.result_text or "")
    # The idempotent charge before it is untouched by the deploy's fate.
    assert world.effects_of("charge") == [world.task("charge").execution_id]
    assert_model_requests(world)


def check_admit(world: World) -> None:
    # Admitted, then killed before any worker ran: a first attempt, not a recovery.
    assert_story_completed(world, interruptions=0)
    assert [a.number for a in world.attempts[world.submission().id]] == [1]
    assert_model_requests(world)


def check_model_before_request(world: World) -> None:
    assert_story_completed(world, interruptions=1)
    assert_model_requests(world)  # the model never saw the cut-off request


def check_model_cut_off(world: World) -> None:
    # The response was not recorded: the model is asked again, and recorded once.
    assert_story_completed(world, interruptions=1)
    assert_model_requests(world, again=[(STORY, 0)])


def check_intent_read_state(world: World) -> None:
    # Safe, intent committed, never executed: recovery executes it (run 2 is its only run).
    assert_story_completed(world, interruptions=1)
    task = world.task("read_state")
    assert task.runs == 2
    assert world.calls_of("read_state") == [(task.execution_id, 2)]
    assert started_reasons(world, "read_state") == [None, "recovery"]
    assert_model_requests(world)


def check_intent_charge(world: World) -> None:
    # Idempotent, never executed: recovery executes it with its execution id; one charge.
    assert_story_completed(world, interruptions=1)
    task = world.task("charge")
    assert task.runs == 2
    assert world.calls_of("charge") == [(task.execution_id, 2)]
    assert started_reasons(world, "charge") == [None, "recovery"]
    assert_model_requests(world)


def check_intent_deploy(world: World) -> None:
    # Unsafe, intent committed, never executed: still unknown, and nothing was deployed.
    assert_unknown_deploy(world, deploys=0)


def check_execute_read_state(world: World) -> None:
    # Safe, executed, result lost: re-executed.
    assert_story_completed(world, interruptions=1)
    task = world.task("read_state")
    assert world.calls_of("read_state") == [(task.execution_id, 1), (task.execution_id, 2)]
    assert started_reasons(world, "read_state") == [None, "recovery"]
    assert_model_requests(world)


def check_execute_charge(world: World) -> None:
    # Idempotent, executed, result lost: re-executed with the SAME execution id, which the
    # downstream dedupes on: the ledger holds exactly one charge for it.
    assert_story_completed(world, interruptions=1)
    task = world.task("charge")
    assert world.calls_of("charge") == [(task.execution_id, 1), (task.execution_id, 2)]
    assert world.ledger == [task.execution_id]
    assert (task.result or "").startswith("order 42 was already charged"), task.result
    assert started_reasons(world, "charge") == [None, "recovery"]
    assert_model_requests(world)


def check_execute_deploy(world: World) -> None:
    # Unsafe, executed, result lost: outcome_unknown, exactly one deploy, the model inspects.
    assert_unknown_deploy(world, deploys=1)


def check_record_deploy(world: World) -> None:
    # The result was recorded before the crash: served from the record, never re-run.
    assert_story_completed(world, interruptions=1)
    task = world.task("deploy")
    assert task.runs == 1
    assert world.calls_of("deploy") == [(task.execution_id, 1)]
    assert_model_requests(world)


def check_turn_commit(world: World) -> None:
    # The final answer was recorded; only the settling transaction died. Recovery settles
    # from the record: the model is not asked again.
    assert_story_completed(world, interruptions=1)
    assert_model_requests(world)
    attempts = world.attempts[world.submission().id]
    assert [a.status for a in attempts] == ["interrupted", "finished"]


def check_continuation(world: World) -> None:
    # The attempt had already yielded cleanly: the crash costs no attempt, the turn goes on.
    assert_story_completed(world, interruptions=0)
    statuses = [a.status for a in world.attempts[world.submission().id]]
    assert "yielded" in statuses and statuses[-1] == "finished", statuses
    assert "interrupted" not in statuses, statuses
    assert_model_requests(world)


def check_recovery_claim(world: World) -> None:
    # A crash during the recovery of an unknown deploy changes nothing about its fate.
    assert_unknown_deploy(world, deploys=1, interruptions=None)
    assert world.submission().interruptions >= 1


def check_hook(world: World) -> None:
    # A crash inside before_tool leaves no intent: the deploy runs normally, once.
    assert_story_completed(world, interruptions=1)
    # The point fires as the hook is entered; the recovered run asks the hook again.
    assert world.hooks[:2] == ["read_state", "charge"], world.hooks
    assert set(world.hooks[2:]) == {"deploy"} and len(world.hooks) in (3, 4), world.hooks
    task = world.task("deploy")
    assert task.runs == 1
    assert started_reasons(world, "deploy") == [None]
    assert world.calls_of("deploy") == [(task.execution_id, 1)]
    assert_model_requests(world)


def check_abort(world: World) -> None:
    # The abort intent was durable before the process died: the submission settles aborted,
    # the in-flight safe read is cancelled, nothing after it ever runs.
    sub = world.submission()
    assert sub.status == "aborted", (sub.status, sub.error)
    assert sub.abort_requested
    assert sub.interruptions == 1
    assert world.task("read_state").status == "cancelled"
    assert not world.tasks_of("charge") and not world.tasks_of("deploy")
    assert world.effects == [] and world.ledger == []
    assert_model_requests(world)


def check_abort_unsafe(world: World) -> None:
    # Aborted while the unsafe deploy ran: it is never re-run, and recorded outcome_unknown.
    sub = world.submission()
    assert sub.status == "aborted", (sub.status, sub.error)
    assert sub.interruptions == 1
    deploy = world.task("deploy")
    assert deploy.status == "outcome_unknown" and deploy.runs == 1
    assert world.task_events(deploy, "tool.outcome_unknown")
    assert len(world.calls_of("deploy")) == 1
    assert len(world.effects_of("deploy")) <= 1
    assert not world.tasks_of("check_deploy")
    assert_model_requests(world)


CASES: list[tuple[str, str, Callable[[World], None]]] = [
    ("submission.after-admit", "story", check_admit),
    ("model.before-request", "story", check_model_before_request),
    ("model.mid-stream", "story", check_model_cut_off),
    ("model.after-finish", "story", check_model_cut_off),
    ("tool.after-intent:read_state", "story", check_intent_read_state),
    ("tool.after-intent:charge", "story", check_intent_charge),
    ("tool.after-intent:deploy", "story", check_intent_deploy),
    ("tool.after-execute:read_state", "story", check_execute_read_state),
    ("tool.after-execute:charge", "story", check_execute_charge),
    ("tool.after-execute:deploy", "story", check_execute_deploy),
    ("tool.after-record:deploy", "story", check_record_deploy),
    ("turn.in-commit", "story", check_turn_commit),
    ("continuation.before-enqueue", "continuation", check_continuation),
    ("continuation.after-enqueue", "continuation", check_continuation),
    ("hook.before-tool:deploy", "hook", check_hook),
    ("abort.after-intent", "abort", check_abort),
    ("abort.after-intent", "abort-deploy", check_abort_unsafe),
]


def case_id(spec: str, scenario: str) -> str:
    return spec if scenario in ("story", "hook") else f"{spec}-{scenario}"


@pytest.mark.parametrize(
    ("spec", "scenario", "check"), [pytest.param(*c, id=case_id(c[0], c[1])) for c in CASES]
)
def test_crash_point(
    crash: CrashHarness, spec: str, scenario: str, check: Callable[[World], None]
) -> None:
    world = crash.crash_and_recover(spec, scenario=scenario)
    check(world)


def test_progress_written_mid_call_does_not_survive_a_crash(crash: CrashHarness) -> None:
    """Killed mid-deploy once its progress was durable: the store shows the running call with
    its progress; recovery settles the unsafe call unknown, and the progress is gone."""
    crash.crash("tool.after-progress:deploy")
    [deploy] = crash.read(
        lambda view: [t for t in view.session_tool_tasks(SESSION) if t.tool == "deploy"]
    )
    assert (deploy.status, deploy.progress) == ("running", "deploying release 2.0"), deploy
    world = crash.recover()
    assert_deploy_killed_after_progress(world)
    assert_model_requests(world)
    crash.follow_up()


def check_partial_closed_out(crash: CrashHarness, world: World, partial: str) -> None:
    """Recovery closed the cut stream's partial out as an interrupted assistant entry
    (``model.interrupted``, once); every request of the turn from then on showed the model
    that text and the note exactly once, in place; the session's history shows the cut reply
    for what it is, followed by the round's answer."""
    sub = world.submission()
    interrupted = world.events_of("model.interrupted")
    assert [(e.turn_id, e.data) for e in interrupted] == [(sub.id, {"round": 0, "text": partial})]
    shown = [json.loads(line) for line in read_lines(crash.workdir / "interruptions.log")]
    assert [(s["prompt"], s["round"]) for s in shown] == [(STORY, r) for r in range(4)], shown
    assert all(s["cut"] == [partial] and s["notes"] == 1 for s in shown), shown
    history = crash.read(lambda view: conversation(view, SESSION))
    cut = [m for m in history if m.interrupted]
    assert [(m.role, m.text) for m in cut] == [("assistant", partial)]
    assert history[history.index(cut[0]) + 1].text == OPENING
    assert not [m for m in history if m.text == INTERRUPTED_NOTE], "the note is for the model"


def test_a_cut_stream_continues_from_its_partial(crash: CrashHarness) -> None:
    """Killed after the first streamed delta, with every delta written as a partial: the
    model is shown what it had said and told it was cut off, so it can continue."""
    crash.partial_every = 0.0
    crash.crash("model.mid-stream")
    world = crash.recover()
    check_model_cut_off(world)
    check_partial_closed_out(crash, world, OPENING[:16])  # the scripted model's first chunk
    crash.follow_up()


def test_recovery_after_claim(crash: CrashHarness) -> None:
    """Three runs: crash mid-deploy, crash again right after the recovery claims the session,
    then a clean run."""
    world = crash.crash_and_recover("tool.after-execute:deploy", "recovery.after-claim")
    check_recovery_claim(world)


def test_two_crashes_in_a_row(crash: CrashHarness) -> None:
    """Killed after the charge's intent, then killed again after a model response on the way
    back: still one charge, one deploy, every invariant."""
    world = crash.crash_and_recover("tool.after-intent:charge", "model.after-finish")
    assert_story_completed(world, interruptions=2)
    task = world.task("charge")
    assert world.calls_of("charge") == [(task.execution_id, 2)]
    assert_model_requests(world, again=[(STORY, 2)])


def test_recovery_on_another_host(crash: CrashHarness) -> None:
    """A worker SIGKILLed on host A is recovered by a process on host B, which cannot see A's
    pids: it must wait for the lease to expire and find it with the periodic scan (§3.9)."""
    spec = "tool.after-execute:deploy"
    assert_crashed(crash.run(spec, hostname="host-a"), spec)
    assert_clean(crash.run(hostname="host-b"), "the run to rest on another host")
    world = crash.world()
    assert_invariants(world, [STORY_REQUEST], sessions=1)
    check_execute_deploy(world)
    attempts = world.attempts[world.submission().id]
    assert [a.worker.split(":")[0] for a in attempts] == ["host-a", "host-b"], attempts
    crash.follow_up()


def test_message_waits_for_the_crashed_turn(crash: CrashHarness) -> None:
    """DESIGN §3.2: a message admitted while a crashed turn awaits recovery waits its turn (it
    is never lost, never run first), then completes."""
    crash.crash("tool.after-execute:deploy")
    assert_clean(crash.run(follow_up=True), "the follow-up run that also recovers")
    world = crash.world()
    assert_invariants(world, [STORY_REQUEST, NEXT_REQUEST], sessions=1)
    story, nxt = world.submission(), world.submission(NEXT_REQUEST)
    assert (story.seq, nxt.seq) == (1, 2)
    assert story.status == "completed" and nxt.status == "completed", (story, nxt)
    assert story.settled_at is not None and nxt.started_at is not None
    assert story.settled_at <= nxt.started_at, "the follow-up ran before the recovered turn"
    check_execute_deploy(world)


def test_attempt_budget_exhausted_by_crashes(crash: CrashHarness) -> None:
    """DESIGN §3.7: past the attempt budget the submission settles failed, naming the calls
    left unknown, and the session comes to rest so the next message runs normally."""
    crash.max_attempts = 2
    world = crash.crash_and_recover("tool.after-execute:deploy", "model.before-request")
    sub = world.submission()
    assert sub.status == "failed" and sub.error is not None, sub
    assert sub.error.code == "attempts_exhausted", sub.error
    deploy = world.task("deploy")
    assert deploy.status == "outcome_unknown"
    assert len(sub.error.unknown_calls) == 1 and deploy.id in sub.error.unknown_calls[0]
    # The timeline says so too: the advisory just before the failure names the unknown call.
    settled = [e for e in world.events if e.type.startswith("submission.") and e.turn_id == sub.id]
    advisory, failed = settled[-2:]
    assert (advisory.type, failed.type) == ("submission.interrupted", "submission.failed")
    assert failed.seq == advisory.seq + 1
    assert advisory.data == {
        "submission": sub.id,
        "interruptions": 2,
        "unknown_calls": list(sub.error.unknown_calls),
        "reason": "attempts_exhausted",
    }
    assert len(world.effects_of("deploy")) == 1
    assert not world.tasks_of("check_deploy")


def test_a_recorded_answer_completes_with_the_attempt_budget_spent(crash: CrashHarness) -> None:
    """DESIGN §4: the final answer was recorded and only the settling transaction died. With
    one attempt allowed, that crash spends the budget; the answer is finished work all the
    same, so the submission settles ``completed`` with it, not ``attempts_exhausted``."""
    crash.max_attempts = 1
    world = crash.crash_and_recover("turn.in-commit")
    check_turn_commit(world)


def test_an_abort_after_the_recorded_answer_completes(crash: CrashHarness) -> None:
    """An abort that arrives after the final answer was recorded (here: while the process that
    recorded it lies dead in the settling transaction) finds the work finished: ``completed``
    with the answer, never ``aborted``."""
    crash.crash("turn.in-commit")
    assert crash.abort(SESSION) == [crash.read(lambda v: v.submissions(SESSION))[0].id]
    world = crash.recover()
    assert world.submission().abort_requested
    check_turn_commit(world)
    crash.follow_up()


def test_every_invocation_makes_progress(crash: CrashHarness) -> None:
    """A turn spans any number of invocations (DESIGN §1), even when an invocation's budget
    is spent before its first step: each invocation must still make progress.

    Each invocation takes at least one step before its deadline may stop it: otherwise it
    would yield at once, forever (a new attempt and two events per wake, never an
    interruption, so the attempt budget would never stop it)."""
    crash.invocation_budget = 0.001
    crash.timeout = 15.0  # the driver gives up 10 s earlier
    code, _out, err = crash.run()
    if code != 0:
        world = crash.world()
        sub = world.submission()
        pytest.fail(
            f"no progress: after {crash.timeout - 10:g}s the turn has "
            f"{len(world.model_calls[sub.id])} model calls and {len(world.attempts[sub.id])} "
            f"attempts ({len(world.events)} events); {err.strip()}"
        )
    world = crash.recover()
    assert_story_completed(world, interruptions=0)
    crash.follow_up()


def test_a_crash_point_that_never_fires_fails_the_run(crash: CrashHarness) -> None:
    """The harness itself: a crash run that exits normally is not mistaken for a crash."""
    result = crash.run("subagent.in-child")  # no subagents yet: nothing reaches this point
    assert result[0] == 0, result
    with pytest.raises(AssertionError, match="the crash point must fire"):
        assert_crashed(result, "subagent.in-child")


# -- the real CLI ---------------------------------------------------------------------------


def fxdurable_cli(*args: str, crash_at: str | None = None) -> tuple[int, str, str]:
    """The installed ``fxdurable`` console script (``python -m fxdurable`` without one)."""
    script = Path(sys.executable).with_name("fxdurable")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "fxdurable"]
    return run_process([*argv, *args], crash_at=crash_at)


def test_demo_walkthrough(tmp_path: Path) -> None:
    """``fxdurable demo``: crash mid-deploy, recover honestly, audit, then a follow-up."""
    d = tmp_path / "demo"
    db = str(d / "demo.db")

    code, out, err = fxdurable_cli(
        "demo", "--crash-at", "tool.after-execute:deploy", "--dir", str(d)
    )
    assert code == -signal.SIGKILL, (code, out, err)
    assert "crash injected at tool.after-execute" in err, err

    code, out, err = fxdurable_cli("demo", "--dir", str(d))
    assert code == 0, (code, out, err)
    assert "Outcome unknown" in out and "NOT be replayed" in out, out
    assert "Outcome: completed" in out, out
    deployments = (d / "deployments.log").read_text().splitlines()
    assert len(deployments) == 1, deployments

    code, out, err = fxdurable_cli("trace", "engineer", "--db", db)
    assert code == 0, (code, out, err)
    deploy_lines = [line for line in out.splitlines() if "tool deploy" in line]
    assert any("outcome_unknown" in line for line in deploy_lines), out

    code, out, err = fxdurable_cli("check", "--db", db, "--at-rest")
    assert code == 0, (code, out, err)
    assert "every invariant holds" in out, out

    code, out, err = fxdurable_cli("demo", "--dir", str(d))
    assert code == 0, (code, out, err)
    assert "Outcome: completed" in out, out
    assert len((d / "deployments.log").read_text().splitlines()) == 1

    code, out, err = fxdurable_cli("check", "--db", db, "--at-rest")
    assert code == 0, (code, out, err)
    assert "2 submissions" in out, out
