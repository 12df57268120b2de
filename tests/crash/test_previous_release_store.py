"""A store the previous release left mid-turn, continued by today's code (issue 28 §4,
docs/upgrading.md), on SQLite, Redis and DynamoDB. ``fixtures/previous-release{,-redis,
-dynamodb}/`` are what ``make_previous_release_store.py`` wrote: the previous release's own
crash driver SIGKILLed after the unsafe ``deploy`` took effect and before its result was
recorded. SQLite's is the store file; Redis's and DynamoDB's are portable dumps
(``store.json``, ``store_dumps.py``) of every key under the store's prefix, or of every item of
its table and every object of its bucket, loaded here into a fresh prefix, or a fresh table
and bucket. Today's driver opens that store (its layout, its records without agent
versions), finds the deploy in flight and, unsafe, never runs it again: it is recorded
``outcome_unknown``, the model is told and checks instead, the turn completes, and the session
takes a next message. The fixture is copied or loaded; it is never written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from crash_harness import CrashHarness
from make_previous_release_store import DUMP, FIXTURES, OFFLOAD_BYTES, STORE
from store_dumps import load_dynamodb, load_redis

from tests.kit.story import NEXT_REQUEST, STORY_REQUEST, UNKNOWN_MARK
from tests.kit.world import assert_model_requests

pytestmark = pytest.mark.crash


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _store(
    kind: str, copy: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The URL of the store the fixture ``copy`` holds (SQLite's file) or names (a dump loaded
    into a fresh prefix or table; each server fixture requested only for its own store)."""
    if kind == "sqlite":
        return f"sqlite:///{copy / STORE}"
    dump = json.loads((copy / DUMP).read_text())
    if kind == "redis":
        url = str(request.getfixturevalue("redis_url"))
        load_redis(dump, url)
        return url
    from aws_support import use_aws_environment
    from dynamo_support import dynamo_url

    use_aws_environment(monkeypatch, copy)
    # The serial moto server: the runtime's heartbeat commits beside its turn.
    url = dynamo_url(request.getfixturevalue("serial_moto_server"), offload_threshold=OFFLOAD_BYTES)
    load_dynamodb(dump, url)
    return url


@pytest.mark.parametrize("kind", list(FIXTURES))
def test_a_turn_the_previous_release_left_in_an_unsafe_call_completes_unknown(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fixture's turn began when the fixture was made: without this, today's recovery
    # finds it past the agent's one-hour turn budget and fails it (a time bomb, CI 2026-12-05).
    monkeypatch.setenv("FXD_CRASH_TURN_TIMEOUT_S", str(10 * 365 * 86400))
    fixture = FIXTURES[kind]
    before = _digest(fixture)
    copy = tmp_path / "copy"
    shutil.copytree(fixture, copy)
    h = CrashHarness(_store(kind, copy, request, monkeypatch), copy / "world")

    left = h.world()  # as the previous release left it, read by today's code
    sub = left.submission()
    assert sub.status == "running", sub
    assert left.task("deploy").status == "running" and left.task("deploy").runs == 1
    assert len(left.effects_of("deploy")) == 1  # it took effect; its result was never written
    assert [a.agent_version for a in left.attempts[sub.id]] == [None]  # kept none then

    world = h.recover()
    sub = world.submission()
    assert sub.status == "completed" and sub.interruptions == 1, sub
    deploy = world.task("deploy")
    assert deploy.status == "outcome_unknown" and deploy.runs == 1
    assert UNKNOWN_MARK in (deploy.result or "")
    assert len(world.effects_of("deploy")) == 1  # never run again
    assert world.task("check_deploy").result == "1 deploy(s) on record"
    assert world.effects_of("charge") == [world.task("charge").execution_id]
    assert_model_requests(world)
    old, new = (a.agent_version for a in world.attempts[sub.id])
    assert old is None and new is not None and new.startswith("sha256:")

    nxt = h.follow_up().submission(NEXT_REQUEST)
    assert nxt.status == "completed"
    requests = [s.request_id for s in sorted(h.world().submissions, key=lambda s: s.seq)]
    assert requests == [STORY_REQUEST, NEXT_REQUEST]
    assert _digest(fixture) == before
