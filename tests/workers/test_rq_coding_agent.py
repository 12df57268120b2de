"""The coding agent (examples/coding_agent) on a pool of two RQ workers and the Redis store,
SIGKILLed mid-turn (issue 13, part 3, on workers).

Both workers carry one crash plan, counted across the pool (``rq_story_agents``): whichever
work horse first reaches the point SIGKILLs itself, and the test SIGKILLs its RQ parent too:
the whole worker is gone, as when its host dies. Or the test SIGKILLs a worker, horse and
parent, from outside while ``shell`` runs the project's tests. The pool's workers do not scan
(``--scan-interval 0``: a killed worker's parent cannot start recovering the session in the
moment before the test kills it too); a worker started in the killed one's place finds the
session held by a dead process of this host and wakes it at once. Each permission prompt
(the coder asks before every ``shell`` command) is approved from the test, through a runtime
on the workers' queue. Then: the turn completed; the workspace, read back from the store (or
from the workers' shared directory), passes the project's tests in a directory of its own;
each fix was applied once; the invariants hold (the suites' checks and ``fxdurable check
--at-rest``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from coding_pool_support import DIRECTORY, STORED, CodingRun, edit_recovered
from crash_cases import REQUEST
from rq_story_agents import CRASH_MARK
from rq_support import RqHarness, WorkerProc, print_measure

pytestmark = [pytest.mark.redis, pytest.mark.crash]

# Far longer than a recovery takes: a recovery within it took the same-host shortcut.
LEASE_TTL_S = 30.0
EDIT_CRASH = "tool.after-execute:edit_file"


def start_pool(
    make_harness: Callable[..., RqHarness], workspace: str, crash_plan: list[str] = ()
) -> CodingRun:
    """Two workers serving the coding agent; ``crash_plan``: the pool's (see the module)."""
    run = CodingRun(make_harness(lease_ttl_s=LEASE_TTL_S), workspace)
    logs = os.pathsep.join(str(run.h.logs / f"worker-{n}.err") for n in (1, 2))
    env = {"FXD_TEST_CRASH_LOG": logs} if crash_plan else None
    run.h.start_workers(2, crash_plan=crash_plan, env=env, scan_interval_s=0)
    return run


def restart(run: CodingRun) -> None:
    """A worker started in place of the killed one (as a supervisor would): its
    reconciliation scan finds the session, held by a dead process of this host, and wakes it
    at once; it or the surviving worker runs the rest of the turn."""
    run.h.start_worker()


@pytest.mark.parametrize("store_url", ["redis"], indirect=True)
@pytest.mark.parametrize("workspace", [STORED, DIRECTORY])
def test_a_worker_killed_after_an_edit_ran(
    make_harness: Callable[..., RqHarness], tmp_path: Path, workspace: str
) -> None:
    """The edit ran, its result not recorded: re-executed by the other worker with the same
    execution id. A stored workspace's first write never committed (it commits with the
    result), so it applies fresh; a directory workspace's ledger finds it applied."""
    run = start_pool(make_harness, workspace, crash_plan=[EDIT_CRASH])
    h = run.h
    run.submit()

    def crashed() -> WorkerProc | None:
        return next((w for w in h.workers if CRASH_MARK in w.log()), None)

    doomed = run.drive(until=crashed)
    assert isinstance(doomed, WorkerProc)
    doomed.kill()  # its RQ parent too
    killed_at = time.time()
    restart(run)
    run.drive()
    print_measure(f"coding turn recovered by the pool ({workspace})", run.settled_at() - killed_at)
    world = run.check(tmp_path)
    assert sum(w.log().count(CRASH_MARK) for w in h.workers) == 1
    sub = world.submission(REQUEST)
    # One, exactly: between its horse's SIGKILL and the test's kill of it, the doomed parent
    # has no wake to take (the pool does not scan; the test answers only a waiting turn). It
    # was 2 in CI while ``--scan-interval 0`` scanned without a pause: the parent woke the
    # session at once and could fork a horse that began an attempt before the kill.
    ran = [(a.number, a.worker, a.status, a.reason) for a in world.attempts[sub.id]]
    assert sub.interruptions == 1, (ran, h.diagnostics())
    edit_recovered(world, applied_before=workspace == DIRECTORY)
    assert run.answered == 2  # the two test runs


@pytest.mark.parametrize("store_url", ["redis"], indirect=True)
@pytest.mark.parametrize("workspace", [STORED])
def test_a_worker_killed_while_shell_runs_the_tests(
    make_harness: Callable[..., RqHarness], tmp_path: Path, workspace: str
) -> None:
    """SIGKILL of a whole worker (horse and parent) while its ``shell`` runs the tests: the
    command dies with it; the unsafe call is recorded ``outcome_unknown`` and never re-run;
    the coder, told so, runs the tests again (asking again), and finishes."""
    run = start_pool(make_harness, workspace)
    run.slow_next_test_run()
    run.submit()
    run.kill_while_shell_runs()
    killed_at = time.time()
    restart(run)
    run.drive()
    print_measure(
        "coding turn recovered by the pool (killed mid-shell)", run.settled_at() - killed_at
    )
    run.check_shell_recovered(run.check(tmp_path))
