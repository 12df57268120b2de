"""A fork SIGKILLed at its commit (issue 12): the fork exists whole or not at all, every
invariant holds, and both the source and the fork complete a next message.

The story runs to rest first (with a crash of its own at ``tool.after-execute:deploy``, so
the fork copies an ``outcome_unknown`` deploy as the model was told of it). Then a real
process forks the story's session after its submission and dies at ``fork.before-commit``
(inside the one transaction: nothing written) and, forking again, at ``fork.after-commit``
(the fork committed, the process gone before it could say so). A third run finds that same
fork (idempotent: ``created`` false) and sends the fork a next message; the source takes its
own next message through the driver.
"""

from __future__ import annotations

import json
import sys

from crash_harness import CrashHarness, assert_clean, assert_crashed, run_process

from tests.kit.story import FOLLOW_UP, NEXT_REQUEST, SESSION, STORY_REQUEST
from tests.kit.world import assert_invariants

FORK = "s-fork"
FORK_NEXT = "fork-next"


def _fork(crash: CrashHarness, after: str, crash_at: str | None = None, *, next_: bool = False):
    argv = [sys.executable, "-m", "tests.kit.fork_process", "--store", crash.store_url]
    argv += ["--dir", str(crash.workdir), "--source", SESSION, "--into", FORK, "--after", after]
    if next_:
        argv += ["--next", FOLLOW_UP, "--request-id", FORK_NEXT]
    return run_process(argv, crash_at=crash_at)


def test_a_fork_killed_at_its_commit_exists_whole_or_not_at_all(crash: CrashHarness) -> None:
    crash.crash("tool.after-execute:deploy")
    crash.recover()
    story = crash.read(lambda v: v.submissions(SESSION))[0].id

    assert_crashed(_fork(crash, story, "fork.before-commit"), "fork.before-commit")
    assert crash.read(lambda v: v.get_session(FORK)) is None, "nothing of the fork was written"
    assert_invariants(crash.world(), [STORY_REQUEST], sessions=1)

    assert_crashed(_fork(crash, story, "fork.after-commit"), "fork.after-commit")
    world = crash.world()
    assert_invariants(world, [STORY_REQUEST], sessions=2)
    source = crash.read(lambda v: [(m.role, m.text) for m in v.messages(SESSION)])
    copied = crash.read(lambda v: [(m.role, m.text) for m in v.messages(FORK)])
    assert copied == source, "the whole conversation of the settled story, no less"
    unknown = crash.read(lambda v: [t.status for t in v.session_tool_tasks(FORK)])
    assert "outcome_unknown" in unknown, unknown

    result = _fork(crash, story, next_=True)
    assert_clean(result, "the fork's next message")
    made, answered = (json.loads(line) for line in result[1].splitlines()[-2:])
    assert made["created"] is False, "the same fork again: nothing written"
    assert answered["status"] == "completed" and answered["text"].startswith("Status: ")

    assert_clean(crash.run(None, follow_up=True), "the source's next message")
    world = crash.world()
    assert_invariants(world, [STORY_REQUEST, FORK_NEXT, NEXT_REQUEST], sessions=2)
    assert world.submission(NEXT_REQUEST).status == "completed"
    # The deploy happened at most once, in the story: the fork copied its outcome, not it.
    assert len(world.effects_of("deploy")) <= 1
