"""Forks under RQ, on SQLite and on Redis (issue 12): a process forking a session that RQ
workers ran is SIGKILLed at ``fork.before-commit`` (nothing written) and at
``fork.after-commit`` (the whole fork written); the invariants hold after each, forking again
finds the same fork, and a fresh worker completes a next message on the source and on the
fork."""

from __future__ import annotations

import json
import signal
import sys

from crash_cases import NEXT_REQUEST, REQUEST, SESSION, STORY
from rq_support import RqHarness

from tests.kit.world import assert_invariants

FORK = "s-fork"
FORK_NEXT = "fork-next"


def _fork(h: RqHarness, after: str, crash_at: str | None = None) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "tests.kit.fork_process", "--store", h.store_url]
    argv += ["--dir", str(h.world_dir), "--source", SESSION, "--into", FORK, "--after", after]
    return h.run_process(argv, crash_at=crash_at, timeout=60)


def _crashed_at(result: tuple[int, str, str], point: str) -> None:
    code, out, err = result
    assert code == -signal.SIGKILL and f"crash injected at {point}" in err, (code, out, err)


def test_a_fork_killed_at_its_commit_exists_whole_or_not_at_all(rq_harness: RqHarness) -> None:
    h = rq_harness
    h.start_worker()
    story = h.submit_one(SESSION, STORY, REQUEST)
    h.wait_settled([story], timeout=30)

    _crashed_at(_fork(h, story, "fork.before-commit"), "fork.before-commit")
    assert h.read(lambda v: v.get_session(FORK)) is None, "nothing of the fork was written"
    assert_invariants(h.world(), [REQUEST], sessions=1)

    _crashed_at(_fork(h, story, "fork.after-commit"), "fork.after-commit")
    assert_invariants(h.world(), [REQUEST], sessions=2)
    source = h.read(lambda v: [(m.role, m.text) for m in v.messages(SESSION)])
    assert h.read(lambda v: [(m.role, m.text) for m in v.messages(FORK)]) == source

    code, out, err = _fork(h, story)
    assert code == 0, (code, out, err)
    assert json.loads(out.splitlines()[-1])["created"] is False, out

    subs = [
        h.submit_one(SESSION, "status?", NEXT_REQUEST),
        h.submit_one(FORK, "status?", FORK_NEXT),
    ]
    settled = h.wait_settled(subs, timeout=30)
    assert [s.status for s in settled] == ["completed", "completed"], settled
    assert h.stop_workers() == [0], h.diagnostics()
    assert_invariants(h.world(), [REQUEST, NEXT_REQUEST, FORK_NEXT], sessions=2)
