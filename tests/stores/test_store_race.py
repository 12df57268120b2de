"""Racing writers on every store (fxdurable.testing.store_race): two real processes commit to
one session at once; exactly one wins each version, the other re-runs its body or gets a
ConflictError, and nothing of a conflicting transaction is written.

SQLite (one file), Redis (a real redis-server) and DynamoDB on the moto server, as the other
process tests start them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fxdurable.backends import open_store
from fxdurable.core.store import Store
from fxdurable.testing.store_race import RaceReport, check_race, interleavings, race, seed_race

REPO = Path(__file__).resolve().parents[2]
OPENER = "fxdurable.backends:open_store"
SESSION = "raced"
COMMITS = 40


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("dynamodb", marks=pytest.mark.aws),
        "postgres",
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path.resolve()}/race.db"
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))  # a schema of this test's own
    from dynamo_support import dynamo_url

    # The serial server: the threaded one does not isolate TransactWriteItems from each
    # other (test_moto_transaction_isolation.py); requests still interleave between writers.
    return dynamo_url(request.getfixturevalue("serial_moto_server"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    from aws_support import aws_environment

    base = {k: v for k, v in os.environ.items() if not k.startswith(("FXD_", "AWS_"))}
    return {**base, **aws_environment(tmp_path), "PYTHONPATH": str(REPO)}


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    if store_url.startswith("dynamodb://"):
        from aws_support import aws_session

        from fxdurable.stores.dynamodb import DynamoStore

        opened: Store = DynamoStore(store_url, session=aws_session())
    else:
        opened = open_store(store_url)
    yield opened
    opened.close()


def test_two_processes_racing_on_one_session_each_take_distinct_versions(
    store: Store, store_url: str, env: dict[str, str]
) -> None:
    seed_race(store, SESSION)
    reports = race(store_url, SESSION, writers=2, commits=COMMITS, opener=OPENER, env=env)
    assert check_race(store, SESSION, reports, commits=COMMITS) == []
    assert all(r.won for r in reports), reports  # each writer committed at least once
    conflicts = sum(r.conflicts for r in reports)
    print(f"{store_url.split(':')[0]}: {interleavings(reports)} hand-overs, {conflicts} conflicts")


# -- the checker itself catches what it should (else the test above proves nothing) ---------


def test_the_race_checker_catches_a_lost_update(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    seed_race(store, SESSION)
    reports = [RaceReport("w0", (1,), 0), RaceReport("w1", (1,), 0)]  # both took version 1
    problems = check_race(store, SESSION, reports, commits=1)
    assert any("lost update" in p for p in problems)
    assert any("version 1 after 2 commits" in p for p in problems)


def test_the_race_checker_catches_a_miscount(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    seed_race(store, SESSION)
    problems = check_race(store, SESSION, [RaceReport("w0", (), 0)], commits=3)
    assert problems == ["w0: 0 won + 0 conflicts, not 3"]
