"""The crash suite on the Postgres pair (issue 27): SIGKILL of real ``fxdurable worker --queue
postgresql://`` processes whose store is the same database (a schema of the test's own),
recovered by the Postgres queue's redelivery.

As on SQS (``test_sqs_crash_suite.py``, whose steps ``redelivery_crash`` shares): a crash
point (``FXD_CRASH_AT``) kills the whole worker, so its claimed wake is neither deleted nor
extended any more; one worker per planned crash dies in turn, then a survivor with the
reconciliation scan off recovers the session from the wake delivered again once its
visibility lease (2 s) lapses, taking the session's lease over at once (the holder's pid is
gone on this host). The invariants are checked from the store and the effect logs, the
session answers a next message, and the recovery time is printed. The cases and their checks
are ``crash_cases``', the RQ and SQS suites' own.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crash_cases import CASES
from postgres_queue_support import PgHarness
from redelivery_crash import crash_and_recover, follow_up

from tests.kit.world import World

pytestmark = [pytest.mark.crash]

# Far longer than a recovery takes (a visibility lease and the rest of the turn), so a
# recovery that settles within it took the same-host shortcut and did not wait for the lease.
LEASE_TTL_S = 30.0


@pytest.mark.parametrize(("plan", "check"), [pytest.param(*c, id=c[0][-1]) for c in CASES])
def test_crash_point(
    make_pg_harness: Callable[..., PgHarness],
    postgres_url: str,
    plan: list[str],
    check: Callable[[World], None],
) -> None:
    h = make_pg_harness(store_url=postgres_url, lease_ttl_s=LEASE_TTL_S)
    world, _ = crash_and_recover(h, plan)
    check(world)
    follow_up(h)
