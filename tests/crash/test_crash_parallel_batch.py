"""A parallel tool batch under a real SIGKILL (DESIGN §5), on the embedded runtime.

The driver's ``batch`` scenario asks, in one response, for ``survey`` (safe), ``read_state``
(safe) and ``reserve`` (idempotent): one batch. survey and reserve hold on their first run, so
the process killed at ``tool.after-record:read_state`` dies with two calls of the batch
running and one result recorded. After the restart: the recorded result is served from its
record, never re-run; survey re-runs (safe) and reserve re-runs with the same execution id
(idempotent), its effect once; the model read the three results in the order it asked (its
final answer quotes them); the shared invariants hold (no unsafe overlap among them), and a
next message completes. ``tool.batch.running`` kills it once the batch's last intent is
recorded: all three calls running, all three re-run by their policies.
"""

from __future__ import annotations

import pytest
from crash_harness import CrashHarness

from tests.kit.world import assert_batch_recovered

pytestmark = pytest.mark.crash


def test_a_crash_with_two_calls_of_a_batch_running(crash: CrashHarness) -> None:
    world = crash.crash_and_recover("tool.after-record:read_state", scenario="batch")
    assert_batch_recovered(world, read_recorded=True)


def test_a_crash_with_every_call_of_a_batch_running(crash: CrashHarness) -> None:
    """``tool.batch.running``: the last intent of the batch is recorded, no result is."""
    world = crash.crash_and_recover("tool.batch.running", scenario="batch")
    assert_batch_recovered(world, read_recorded=False)
