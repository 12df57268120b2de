"""The coding agent (examples/coding_agent) on ``fxdurable worker --queue sqs://`` processes
and the DynamoDB store (records past 256 bytes, and the workspace's blobs, in S3), all on moto,
SIGKILLed mid-turn (issue 13, part 3, on workers).

An SQS worker runs its wakes in its own process, so a crash point kills the whole worker with
its message undeleted. The worker that ran the turn dies once its ``edit_file`` ran (result
unrecorded); a worker started in its place, its reconciliation scan off, gets that message
again once its visibility timeout (2 s) lapses, takes the session over at once (the holder's
pid is gone on this host) and finishes the turn on the files the store holds: the dead
worker's write never committed, so the edit is applied once, by the re-execution. The
permission prompts are approved from the test; the checks are the RQ pool's
(``coding_pool_support``): the turn completed, the exported workspace passes the project's
tests, each fix once, the invariants and ``fxdurable check``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from coding_pool_support import CodingRun, edit_recovered
from crash_cases import REQUEST
from sqs_support import SqsHarness
from test_rq_coding_agent import EDIT_CRASH, LEASE_TTL_S
from test_sqs_crash_suite import delivered_again
from worker_support import print_measure

pytestmark = [pytest.mark.crash]


def test_a_worker_killed_after_an_edit_ran(
    make_sqs_harness: Callable[..., SqsHarness], tmp_path: Path
) -> None:
    run = CodingRun(make_sqs_harness(lease_ttl_s=LEASE_TTL_S))
    h = run.h
    doomed = h.start_worker(env={"FXD_CRASH_AT": EDIT_CRASH}, scan_interval_s=0)
    run.submit()
    run.drive(until=lambda: not doomed.alive())
    assert doomed.proc.wait() == -signal.SIGKILL, doomed.log()
    assert f"crash injected at {EDIT_CRASH}" in doomed.log(), doomed.log()
    killed_at = time.time()
    survivor = h.start_worker(scan_interval_s=0)
    run.drive()
    print_measure("SQS coding turn recovered (redelivery)", run.settled_at() - killed_at)
    world = run.check(tmp_path)
    assert world.submission(REQUEST).interruptions == 1
    edit_recovered(world, applied_before=False)
    assert run.answered == 2
    # The wake of the answer the dead worker was running was delivered again and handled.
    assert delivered_again(survivor, 2, reason="answer")
    assert world.attempt_pids(REQUEST)[-1] == survivor.pid


def test_a_worker_killed_while_shell_runs_the_tests(
    make_sqs_harness: Callable[..., SqsHarness], tmp_path: Path
) -> None:
    """SIGKILL from outside while the worker's ``shell`` runs the tests: the command dies with
    it; a worker started in its place gets the answer's wake again and finishes the turn."""
    run = CodingRun(make_sqs_harness(lease_ttl_s=LEASE_TTL_S))
    h = run.h
    first = h.start_worker(scan_interval_s=0)
    run.slow_next_test_run()
    run.submit()
    assert run.kill_while_shell_runs() is first
    killed_at = time.time()
    survivor = h.start_worker(scan_interval_s=0)
    run.drive()
    print_measure("SQS coding turn recovered after a kill mid-shell", run.settled_at() - killed_at)
    run.check_shell_recovered(run.check(tmp_path))
    assert delivered_again(survivor, 2, reason="answer")
