"""The coding agent's run interfered with from outside, in real processes: SIGKILLed while its
``shell`` runs the project's tests, steered from another process while it works, and forked
from before its first edit into a session of its own."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from coding_support import (
    Background,
    UnittestGate,
    assert_at_rest_invariants,
    assert_cart_fixed_once,
    audit,
    ledger,
    project_tests,
    read_db,
    readme_args,
    run,
    tree,
    workspace,
)

from examples.coding_agent.task import EMPTY_CART_STEER, EMPTY_CART_TEST, TESTS


def _shell_tasks(where: Path) -> list:  # type: ignore[type-arg]
    return read_db(where, lambda v: [t for t in v.session_tool_tasks("coder") if t.tool == "shell"])


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its new parent to reap it counts)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize(
    ("sig", "exit_code"),
    [
        # The worker dies on the spot; the kernel tells the shell tool's supervisor
        # (PR_SET_PDEATHSIG), which kills the command's process group.
        (signal.SIGKILL, -signal.SIGKILL),
        # A graceful stop: the shell runs on past the shutdown grace (10 s), so the runtime
        # cancels it as it closes, killing its process group; run.py says it stopped.
        (signal.SIGTERM, 3),
    ],
    ids=["SIGKILL", "SIGTERM"],
)
def test_stopped_while_the_shell_runs_the_tests_the_next_run_runs_them_again(
    tmp_path: Path, sig: signal.Signals, exit_code: int
) -> None:
    where = tmp_path / ".fxd-coding"
    gate = UnittestGate(tmp_path / "gate")
    first = Background(where, "--yes", **gate.env())
    pid, ppid = gate.held(first)
    # The test run (bash execs a lone command) is the child of the shell tool's supervisor,
    # the worker's own child; and the session shows its shell call running.
    assert _parent(ppid) == first.pid
    assert b"unittest" in Path(f"/proc/{pid}/cmdline").read_bytes()
    (shell,) = _shell_tasks(where)
    assert shell.status == "running", first.output
    os.kill(first.pid, sig)
    assert first.wait() == exit_code, first.output
    # SIGKILL: PR_SET_PDEATHSIG tells the shell tool's supervisor, which kills the command's
    # group; SIGTERM: the runtime cancels the call after the grace, killing the group.
    deadline = time.monotonic() + 10
    while not _gone(pid):
        assert time.monotonic() < deadline, "the stopped worker's test run is still running"
        time.sleep(0.01)
    assert "turn completed" not in first.output
    if sig == signal.SIGTERM:
        assert "Stopped at a step boundary (or, for a step still running" in first.output
    audit(where)  # the store the stop left is consistent before anything recovers it

    done = run(where)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Recovering session 'coder': 1 unfinished turn(s)" in out
    tasks = _shell_tasks(where)
    assert tasks[0].id == shell.id
    # Settled unknown (shell is unsafe); the model reads that and asks to run the tests
    # again; the runtime refuses that first blind repeat; the model repeats it deliberately,
    # a person is asked again, and the tests run: failing, then passing after the fixes.
    assert [t.status for t in tasks] == [
        "outcome_unknown",
        "refused",
        "completed",
        "completed",
    ]
    assert [t.result.partition("\n")[0] for t in tasks[2:]] == ["exit code: 1", "exit code: 0"]
    assert f"asks a person (about shell r{tasks[2].round}.t0)" in out
    assert "Its tests, run by this script: Ran 6 tests" in out
    assert project_tests(where).returncode == 0
    assert_cart_fixed_once(where)
    assert_at_rest_invariants(where)


def test_steered_from_another_process_it_also_adds_an_empty_cart_test(tmp_path: Path) -> None:
    where = tmp_path / ".fxd-coding"
    steer_args = readme_args(2, "--steer")  # as the docs page has it, from another terminal
    assert steer_args == ["--steer", EMPTY_CART_STEER]
    early = run(where, *steer_args)
    assert early.returncode == 2 and "no session 'coder'" in early.stderr, early.stderr
    gate = UnittestGate(tmp_path / "gate")
    working = Background(where, "--yes", **gate.env())
    gate.held(working)  # the agent is at work: its first test run is running
    steer = run(where, *steer_args)
    assert steer.returncode == 0, steer.stdout + steer.stderr
    assert "Steered session 'coder'" in steer.stdout
    gate.release()
    assert working.wait() == 0, working.output
    out = working.output
    # Recorded while the test run ran; shown to the model at the next step, after its result.
    steered = out.index(f"you (steering the running turn): {EMPTY_CART_STEER}")
    assert out.index("tool shell r3.t0 running") < steered < out.index("tool shell r3.t0 completed")
    assert out.index("steering shown to the model in round 4") > steered
    assert "Its tests, run by this script: Ran 7 tests" in out
    _assert_empty_cart_test_added(where)


def test_a_steer_survives_the_steering_process_and_the_worker_being_killed(
    tmp_path: Path,
) -> None:
    """The steering process dies right after recording it, the worker before reading it:
    the re-run shows it to the model, which adds the test."""
    where = tmp_path / ".fxd-coding"
    gate = UnittestGate(tmp_path / "gate")
    working = Background(where, "--yes", **gate.env())
    gate.held(working)
    steer = run(where, "--steer", EMPTY_CART_STEER, "--crash-at", "steer.after-record")
    assert steer.returncode == -signal.SIGKILL, steer.stdout + steer.stderr
    os.kill(working.pid, signal.SIGKILL)
    assert working.wait() == -signal.SIGKILL
    assert "steering shown to the model" not in working.output
    done = run(where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steering shown to the model in round 4" in done.stdout
    assert "Its tests, run by this script: Ran 7 tests" in done.stdout
    _assert_empty_cart_test_added(where)


def _assert_empty_cart_test_added(where: Path) -> None:
    tests = (workspace(where) / TESTS).read_text()
    assert tests.count(f"def {EMPTY_CART_TEST}(self):") == 1, tests
    verbose = project_tests(where)
    assert verbose.returncode == 0, verbose.stderr
    assert f"{EMPTY_CART_TEST} (tests.test_cart.CartTest" in verbose.stderr
    assert "Ran 7 tests" in verbose.stderr
    assert_cart_fixed_once(where)
    assert_at_rest_invariants(where)


def _after_reading_the_cart(view):  # type: ignore[no-untyped-def]
    """The event after which the coder has read the cart and edited nothing yet."""
    read = next(
        t
        for t in view.session_tool_tasks("coder")
        if t.tool == "read_file" and '"shop/cart.py"' in t.arguments
    )
    return next(
        e.seq
        for e in view.events("coder")
        if e.type == "tool.completed" and e.data.get("task") == read.id
    )


def _first_edit_events(view) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The events where the coder's first edit started and where it completed."""
    edit = next(t for t in view.session_tool_tasks("coder") if t.tool == "edit_file")
    started, completed = (
        e.seq
        for e in view.events("coder")
        if e.type in ("tool.started", "tool.completed") and e.data.get("task") == edit.id
    )
    return started, completed


def test_a_fork_from_before_the_first_edit_fixes_its_own_copy(tmp_path: Path) -> None:
    where = tmp_path / ".fxd-coding"
    done = run(where, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    parent_files, parent_ledger = tree(workspace(where)), ledger(where)

    point = read_db(where, _after_reading_the_cart)
    fork_args = readme_args(3, "--fork-from")  # the docs page's command, and its event number
    assert fork_args == ["--session", "coder-2", "--fork-from", f"coder@{point}"]
    forked = run(where, *fork_args)
    out = forked.stdout
    assert forked.returncode == 0, out + forked.stderr
    assert f"Forked session 'coder' after its event {point} into 'coder-2' (6 messages)" in out
    assert "Its tests, run by this script: Ran 6 tests" in out
    assert f"workspace: {workspace(where, 'coder-2').resolve()}" in out
    # The fork edited a fresh copy of the project (its ledger's chain starts at the
    # template's cart), and the parent's files and ledger are as its run left them.
    assert_cart_fixed_once(where, "coder-2")
    assert project_tests(where, "coder-2").returncode == 0
    assert tree(workspace(where)) == parent_files
    assert ledger(where) == parent_ledger
    assert not set(ledger(where, "coder-2")) & set(parent_ledger)
    again = run(where, *fork_args)
    assert again.returncode == 0 and "already finished its task" in again.stdout, again.stdout
    assert_at_rest_invariants(where)

    # Forked after the first edit, the fork believes an edit its fresh copy lacks: run.py
    # warns, naming the point just before that edit (here the model's reply asking for it).
    edited = read_db(where, lambda v: _first_edit_events(v))
    late = run(
        where,
        *("--session", "coder-3", "--fork-from", f"coder@{edited[1]}"),
        *("--crash-at", "model.before-request"),  # the warning is all this run is for
    )
    assert late.returncode == -signal.SIGKILL, late.stdout + late.stderr
    assert "the fork's conversation holds 1 file edit(s)" in late.stdout, late.stdout
    assert f"--fork-from coder@{edited[0] - 1} is just before the first edit" in late.stdout


def test_a_fork_of_a_crashed_run_and_the_run_itself_each_finish_in_their_own_files(
    tmp_path: Path,
) -> None:
    """Forked while its source's turn is unfinished (killed with the first edit's intent
    recorded): the fork's run resumes the source too, as any worker on the store would, and
    says so; each session's edits land in its own workspace, once."""
    where = tmp_path / ".fxd-coding"
    crashed = run(where, "--crash-at", "tool.after-intent:edit_file")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    point = read_db(where, _after_reading_the_cart)
    forked = run(where, "--session", "coder-2", "--fork-from", f"coder@{point}")
    out = forked.stdout
    assert forked.returncode == 0, out + forked.stderr
    assert "Session 'coder' has an unfinished turn too: this process resumes it" in out
    assert "Its tests, run by this script: Ran 6 tests" in out
    assert_cart_fixed_once(where, "coder-2")
    resumed = run(where)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Recovering session 'coder'" in resumed.stdout
    assert "has an unfinished turn too" not in resumed.stdout
    assert_cart_fixed_once(where)
    assert not set(ledger(where, "coder-2")) & set(ledger(where))
    assert_at_rest_invariants(where)
