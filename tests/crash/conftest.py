"""Fixtures of the crash suite; the harness itself is ``crash_harness.py`` beside this file.

``store_url`` is parametrised by backend: a Redis or DynamoDB crash suite adds its param (with
its server setup and teardown) and every crash test runs on it unchanged.

``postgres``: the PostgreSQL store, a schema of the test's own on the run's server
(``postgres_url`` in tests/conftest.py: one initdb'd server per xdist worker, the schema dropped
afterwards). Every test that takes ``store_url`` or ``crash`` is parametrised with it, but the
whole suite on both stores would double the suite's time (measured: 81 Postgres cases, 609 s
of test time, as long as their SQLite twins), so a Postgres case is deselected (pytest counts
it: "N deselected") unless it is in the subset whose subject is the store's own commits
(:data:`POSTGRES_SUBSET`): every crash point of ``test_crash_suite.py::test_crash_point``,
the merged commits, the erase's batches, the fork's commit, the timers' expiry, and the API key
searched in the stored rows, with the first model wire format (``openai``) only. The rest (the
model boundary over HTTP, prompt caching, the agent features) make the same store calls at
the same points; the agent features also run on the Postgres pair with workers
(tests/workers/test_postgres_agent_crash.py). The subset is 29 cases, about 200 s of test time
(two cores shared, December 2026). ``FXD_TEST_PG_CRASH=all`` runs every case.
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

STORE_PARAMS = ["sqlite", "postgres"]
# File -> the tests of it that run on Postgres (None: all of them); see the docstring.
POSTGRES_SUBSET: dict[str, set[str] | None] = {
    "test_crash_suite.py": {"test_crash_point"},
    "test_crash_merged_commits.py": None,
    "test_crash_erase.py": None,
    "test_fork_crash.py": None,
    "test_crash_timers.py": None,
    "test_crash_http_providers.py": {"test_api_key_never_stored_or_printed"},
}


def _postgres_case_runs(item: pytest.Item) -> bool:
    params = getattr(item, "callspec", None)
    if params is None or params.params.get("store_url") != "postgres":
        return True
    if params.params.get("provider", "openai") != "openai":
        return False
    tests = POSTGRES_SUBSET.get(item.path.name, set())
    return tests is None or getattr(item, "originalname", item.name) in tests


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("FXD_TEST_PG_CRASH") == "all":
        return
    here = Path(HERE)
    kept, dropped = [], []
    for item in items:
        (kept if here not in item.path.parents or _postgres_case_runs(item) else dropped).append(
            item
        )
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(params=STORE_PARAMS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store of each backend the crash suite runs on."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path.resolve()}/crash.db"
    if request.param == "postgres":
        # Requested only here, so a SQLite-only run never starts a PostgreSQL server.
        return str(request.getfixturevalue("postgres_url"))
    raise NotImplementedError(request.param)  # pragma: no cover


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The outside world: the effect log, the charge ledger, the call logs."""
    path = tmp_path / "world"
    path.mkdir()
    return path


@pytest.fixture
def crash(store_url: str, workdir: Path) -> CrashHarness:
    return CrashHarness(store_url, workdir)
