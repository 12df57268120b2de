"""The crash suite on merged commits (issue 23 §2), on the embedded runtime: scenario
``sequence`` (:mod:`tests.kit.merged_commits`: read_state, charge and deploy of one response,
one after another, each result but the last committed with the next call's intent) killed at
both names of each merged state and after the round's last result."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crash_harness import CrashHarness

from tests.kit.merged_commits import MERGED_CASES
from tests.kit.world import World

pytestmark = pytest.mark.crash


@pytest.mark.parametrize(("spec", "check"), [pytest.param(*c, id=c[0]) for c in MERGED_CASES])
def test_a_merged_commit_killed(
    crash: CrashHarness, spec: str, check: Callable[[World], None]
) -> None:
    check(crash.crash_and_recover(spec, scenario="sequence"))
