"""Fixtures of the crash suite; the harness itself is ``crash_harness.py`` beside this file.

``store_url`` is parametrised by backend, and every crash test runs on each unchanged: the
embedded runtime's driver processes on that store. SQLite runs every case. The other stores
run a subset (:data:`SUBSETS`: store -> file -> its tests that run there, ``None`` for all of
them), with the first model wire format (``openai``) only; any other case is deselected
(pytest counts it: "N deselected"), since the whole suite on each store would multiply the
suite's time. ``FXD_TEST_CRASH_FULL=postgres,redis`` (or ``all``) runs every case on the
stores it names. Each server fixture is requested only by ``store_url``, for its own param,
so a SQLite-only run (``-k sqlite``) starts no server.

``postgres``: the PostgreSQL store, a schema of the test's own on the run's server
(``postgres_url`` in tests/conftest.py: one initdb'd server per xdist worker, the schema dropped
afterwards). The whole suite on it would double the suite's time (measured: 81 Postgres cases,
609 s of test time, as long as their SQLite twins), so its subset is the cases whose subject
is the store's own commits: every crash point of ``test_crash_suite.py::test_crash_point``,
the merged commits, the erase's batches, the fork's commit, the timers' expiry, and the API key
searched in the stored rows. The rest (the model boundary over HTTP, prompt caching, the agent
features) make the same store calls at the same points; the agent features also run on the
Postgres pair with workers (tests/workers/test_postgres_agent_crash.py). The subset is 29
cases, about 200 s of test time (two cores shared, December 2026).

``redis``: the Redis store, a key prefix of the test's own on the run's ``redis-server``
(``redis_url``: AOF on, the prefix's keys deleted afterwards). Its subset: the timers
(``test_crash_timers.py``, 4 cases, 5.5 s of test time) and every crash point of
``test_crash_point`` (17 cases, 34 s).

``dynamodb``: the DynamoDB store, a table and an S3 bucket of the test's own on the run's
*serial* moto server (the runtime's heartbeat renews the lease while the turn commits, and
moto's threaded server does not isolate concurrent transactions: tests/conftest.py), made
before the drivers start (``dynamo_support.made_dynamo_url``, as tests/workers do), every
record past 256 bytes offloaded to the bucket; the test process and its drivers get moto's
dummy credentials (``aws_support.use_aws_environment``). Its subset: the timers (4 cases,
16 s of test time). ``test_crash_point`` is left out: its 17 cases cost 78 s of test time on
it, past the minute a store's subset may add (all figures: two cores shared, December 2026);
the crash points on DynamoDB run with the SQS workers (tests/workers/test_sqs_crash_suite.py).
``FXD_TEST_CRASH_FULL=dynamodb`` runs them here too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # whatever pytest's import mode, the tests import crash_harness
    sys.path.insert(0, HERE)

from crash_harness import CrashHarness  # noqa: E402

STORE_PARAMS = ["sqlite", "postgres", "redis", "dynamodb"]
# Store -> file -> the tests of it that run on that store (None: all of them); a file not
# listed runs none. SQLite runs every case. See the docstring.
SUBSETS: dict[str, dict[str, set[str] | None]] = {
    "postgres": {
        "test_crash_suite.py": {"test_crash_point"},
        "test_crash_merged_commits.py": None,
        "test_crash_erase.py": None,
        "test_fork_crash.py": None,
        "test_crash_timers.py": None,
        "test_crash_http_providers.py": {"test_api_key_never_stored_or_printed"},
    },
    "redis": {
        "test_crash_suite.py": {"test_crash_point"},
        "test_crash_timers.py": None,
    },
    "dynamodb": {"test_crash_timers.py": None},
}
# Records past this many bytes go to the DynamoDB test's bucket (as in tests/workers): small,
# so the story's tool outputs and messages are offloaded too.
DYNAMO_OFFLOAD_BYTES = 256


def _full_stores() -> set[str]:
    """The stores ``FXD_TEST_CRASH_FULL`` names (``all``: every one), which run every case."""
    named = {s.strip() for s in os.environ.get("FXD_TEST_CRASH_FULL", "").split(",")}
    return set(SUBSETS) if "all" in named else named & set(SUBSETS)


def _case_runs(item: pytest.Item, full: set[str]) -> bool:
    params = getattr(item, "callspec", None)
    store = params.params.get("store_url") if params is not None else None
    if store not in SUBSETS or store in full:
        return True
    assert params is not None
    if params.params.get("provider", "openai") != "openai":
        return False
    tests = SUBSETS[store].get(item.path.name, set())
    return tests is None or getattr(item, "originalname", item.name) in tests


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here, full = Path(HERE), _full_stores()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if here not in item.path.parents or _case_runs(item, full) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=STORE_PARAMS)
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A fresh, empty store of each backend the crash suite runs on. Each server fixture is
    requested only here, so a SQLite-only run starts none."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path.resolve()}/crash.db"
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    if request.param == "redis":
        return str(request.getfixturevalue("redis_url"))
    if request.param == "dynamodb":
        return dynamodb_store_url(request, tmp_path, monkeypatch)
    raise NotImplementedError(request.param)  # pragma: no cover


def dynamodb_store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A table and a bucket of the test's own on the run's serial moto server (the runtime's
    heartbeat commits beside its turn: tests/conftest.py says why serial), made here. The
    test process and the drivers it starts (which inherit its environment) get moto's dummy
    credentials and none of the machine's profiles for the length of the test."""
    from aws_support import use_aws_environment
    from dynamo_support import made_dynamo_url

    endpoint_url = str(request.getfixturevalue("serial_moto_server"))
    use_aws_environment(monkeypatch, tmp_path)
    return made_dynamo_url(endpoint_url, offload_threshold=DYNAMO_OFFLOAD_BYTES)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The outside world: the effect log, the charge ledger, the call logs."""
    path = tmp_path / "world"
    path.mkdir()
    return path


@pytest.fixture
def crash(store_url: str, workdir: Path) -> CrashHarness:
    return CrashHarness(store_url, workdir)
