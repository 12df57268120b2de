"""SIGKILL between an abort's record and the cancellation it causes (docs/aborting.md).

The driver runs the turn and aborts it in the same process, so the interrupt watcher
(runtime/interrupts.py) reads the abort at once and dies at ``abort.before-cancel``: the
intent is durable, the running call not yet cancelled. Recovery must settle exactly as for a
crash just after the intent (DESIGN §5): the submission ``aborted``, the safe read
``cancelled``, the unsafe deploy ``outcome_unknown`` and never run again.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crash_harness import CrashHarness
from test_crash_suite import check_abort, check_abort_unsafe

from tests.kit.world import World

CASES: list[tuple[str, Callable[[World], None]]] = [
    ("abort", check_abort),
    ("abort-deploy", check_abort_unsafe),
]


@pytest.mark.parametrize(("scenario", "check"), CASES, ids=[c[0] for c in CASES])
def test_a_kill_between_the_abort_and_the_cancellation(
    crash: CrashHarness, scenario: str, check: Callable[[World], None]
) -> None:
    world = crash.crash_and_recover("abort.before-cancel", scenario=scenario)
    check(world)
