"""Fixtures of the crash suite; the harness itself is ``crash_harness.py`` beside this file.

``store_url`` is parametrised by backend: a Redis or DynamoDB crash suite adds its param (with
its server setup and teardown) and every crash test runs on it unchanged.

``postgres``: the PostgreSQL store, a schema of the test's own on the run's server
(``postgres_url`` in tests/conftest.py: one initdb'd server per xdist worker, the schema dropped
afterwards). Every test that takes ``store_url`` or ``crash`` runs on it. A test that is about
SQLite itself (its files on disk) names its backend with ``@pytest.mark.parametrize(
"store_url", ["sqlite"], indirect=True)`` and a comment saying why, instead of skipping.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # whatever pytest's import mode, the tests import crash_harness
    sys.path.insert(0, HERE)

from crash_harness import CrashHarness  # noqa: E402

STORE_PARAMS = ["sqlite", "postgres"]


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
