"""A rolling deploy on RQ + Redis (or SQLite) and SQS + DynamoDB (issue 28 §4,
docs/upgrading.md): a worker of the previous release (``previous_release.PREVIOUS``) and a
current one serve one store and one queue while turns are in flight, then the old one is
stopped as a deploy stops it (SIGTERM: its turn ends at a step boundary and is continued by
whichever worker takes the wake). Every turn settles once: completed, each charge and deploy
taken once, the invariants as the current code audits them; a turn the old release began is
finished by the current one; the old release's turns record no agent version (it kept none),
the current one's do."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from previous_release import old_worker_env, previous_tree
from rq_support import RqHarness, wait_until
from sqs_support import SqsHarness
from worker_support import WorkerHarness

from fxdurable.core.store import ReadView
from tests.kit.story import done_text
from tests.kit.world import assert_invariants

pytestmark = pytest.mark.slow

# Three tools a turn. The old worker's take 1 s each, so the SIGTERM that stops it lands
# inside one of its turns (a turn handed over), the new one's 0.25 s.
OLD_TOOLS = {"FXD_TEST_TOOL_S": "1.0"}
NEW_TOOLS = {"FXD_TEST_TOOL_S": "0.25"}


@pytest.mark.redis
def test_an_old_and_a_new_rq_worker_share_a_store_and_every_turn_settles_once(
    make_harness: Callable[..., RqHarness], tmp_path: Path
) -> None:
    deploy_across_releases(make_harness(), tmp_path, sessions=8)


@pytest.mark.aws
def test_an_old_and_a_new_sqs_worker_share_a_store_and_every_turn_settles_once(
    make_sqs_harness: Callable[..., SqsHarness], tmp_path: Path
) -> None:
    # No scan: the wakes and the old worker's continuation are messages (the harness's scan
    # every 0.5 s would re-wake every queued session, and moto is slow to scan).
    deploy_across_releases(make_sqs_harness(scan_interval_s=0), tmp_path, sessions=4)


def deploy_across_releases(h: WorkerHarness, tmp_path: Path, *, sessions: int) -> None:
    tree = previous_tree(tmp_path / "previous")
    old_env = {**OLD_TOOLS, **old_worker_env(tree, tmp_path / "old-mods", h.module)}
    old = h.start_worker(env=old_env)
    items = [(f"s{i}", f"story r{i}", f"req-{i}") for i in range(sessions)]
    sub_ids = h.submit(items)

    def old_turn_running() -> str | None:
        """A session whose turn the old release holds, between two of its tool calls."""

        def find(view: ReadView) -> str | None:
            for sub_id in sub_ids:
                sub = view.get_submission(sub_id)
                attempts = view.attempts(sub_id)
                if (
                    sub is not None
                    and sub.status == "running"
                    and attempts
                    and attempts[-1].agent_version is None
                ):
                    return str(sub.session_id)
            return None

        return h.read(find)

    wait_until(old_turn_running, 30, "the old release to run a turn")
    h.start_worker(env=NEW_TOOLS)  # the new release joins while the old one works
    wait_until(
        lambda: h.read(lambda v: any(a.agent_version for s in sub_ids for a in v.attempts(s))),
        30,
        "the new release to run a turn",
    )
    wait_until(old_turn_running, 30, "the old release to be inside a turn")
    assert old.stop(signal.SIGTERM) == 0, old.log()  # the deploy stops the old worker
    subs = h.wait_settled(sub_ids, timeout=90)
    assert [s.status for s in subs] == ["completed"] * sessions, h.diagnostics()
    assert [s.result_text for s in subs] == [done_text(f"r{i}") for i in range(sessions)]
    assert h.stop_workers() == [0], h.diagnostics()  # the new one (the old one has stopped)

    world = h.world()
    requests = [request_id for *_, request_id in items]
    assert_invariants(world, requests)
    for tool in ("charge", "deploy"):
        executions = sorted(world.task(tool, r).execution_id for r in requests)
        assert sorted(world.effects_of(tool)) == executions, tool  # each once
    versions = [[a.agent_version for a in world.attempts[s.id]] for s in subs]
    assert any(None in v for v in versions) and any(any(v) for v in versions), versions
    # A turn begun by the old release and finished by the new one.
    assert any(v[0] is None and v[-1] is not None for v in versions), versions
    code, out, err = h.run_cli("check", "--store", h.store_url, "--at-rest")
    assert code == 0, (code, out, err)
