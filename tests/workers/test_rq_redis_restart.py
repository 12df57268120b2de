"""Redis restarted mid-run with AOF on: no admitted submission is lost (issue 4).

One dedicated redis-server (``appendfsync always``) holds both the store and the RQ queue. It is
SIGKILLed while workers run turns, restarted from its AOF on the same port, and every
submission admitted before the kill must still settle exactly once, with the invariants intact.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from rq_support import RqHarness

from tests.kit.world import SETTLED, assert_invariants, read_world

pytestmark = [pytest.mark.redis, pytest.mark.crash]


def test_redis_killed_and_restarted_mid_run_loses_no_submission(
    tmp_path: Path, redis_factory: Callable[..., object]
) -> None:
    server = redis_factory(fsync="always")
    store_url = f"{server.url}/0?prefix=t{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
    harness = RqHarness(
        tmp_path / "h",
        store_url=store_url,
        redis_port=server.port,  # type: ignore[attr-defined]
        redis_db=1,
        lease_ttl_s=3.0,
    )
    try:
        harness.start_workers(2, env={"FXD_TEST_TOOL_S": "0.3"})
        items = [(f"s{n}", f"story {n}", f"restart-{n}") for n in range(6)]
        ids = harness.submit(items)
        time.sleep(0.8)  # turns are mid-flight: tools sleep 0.3 s each
        in_flight = harness.read(lambda v: [v.get_submission(i) for i in ids])
        assert any(s is not None and s.status not in SETTLED for s in in_flight), (
            "every turn finished before the kill: the test would prove nothing"
        )
        server.restart(signal.SIGKILL)  # type: ignore[attr-defined]
        # Workers whose Redis connection broke may have exited: start fresh ones as a deploy
        # would, and let the reconciliation scan find whatever the crash left behind.
        for worker in harness.workers:
            if not worker.alive():
                worker.kill()
        harness.start_workers(2)
        subs = harness.wait_settled(ids, timeout=90)
        assert all(s.status in SETTLED for s in subs)
        harness.stop_workers()
        world = read_world(harness.store_url, harness.world_dir)
        assert {s.request_id for s in world.submissions} == {r for _, _, r in items}
        assert_invariants(world, [r for _, _, r in items])
    finally:
        harness.cleanup()
