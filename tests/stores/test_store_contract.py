"""The store contract (fxdurable.testing.store_contract), run against every backend.

The ``store`` fixture (one store per backend, parametrised) is in tests/stores/conftest.py,
where a new backend is added; :class:`TestStoreContract` runs the shipped suite on each.
Below it, SQLite specifics (Redis specifics are in test_redis_store.py).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from fxdurable.backends import open_store
from fxdurable.errors import ConfigurationError, ConflictError
from fxdurable.stores.sqlite import SqliteStore
from fxdurable.testing.store_contract import StoreContract
from fxdurable.testing.store_contract.builders import a_session


class TestStoreContract(StoreContract):
    """The shipped suite, on every store of ``conftest.FACTORIES``."""


# -- SQLite specifics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgres://localhost/db",
        "sqlite:",
        "sqlite://",
        "sqlite:///",
        "sqlite3:///x.db",
        "x.db",
    ],
)
def test_sqlite_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"sqlite:///"):
        SqliteStore(url)


def _must_refuse(url: str) -> ConfigurationError:
    try:
        store = SqliteStore(url)
    except ConfigurationError as exc:
        return exc
    store.close()
    pytest.fail(f"SqliteStore accepted {url!r}")


def test_sqlite_rejects_a_host(tmp_path: Path) -> None:
    """``sqlite://host/x.db`` names a host a file store cannot have; it must not be ignored."""
    _must_refuse(f"sqlite://somehost/{tmp_path}/x.db")


@pytest.mark.parametrize(
    ("query", "mentions"),
    [
        ("synchronus=FULL", "synchronus"),
        ("journal_mode=DELETE", "journal_mode"),
        ("synchronous=OFF", "synchronous"),
        ("synchronous=sometimes", "synchronous"),
        ("busy_timeout_ms=soon", "busy_timeout_ms"),
    ],
)
def test_sqlite_rejects_bad_options(tmp_path: Path, query: str, mentions: str) -> None:
    with pytest.raises(ConfigurationError, match=mentions):
        SqliteStore(f"sqlite:///{tmp_path}/x.db?{query}")


@pytest.mark.parametrize("query", ["synchronus", "synchronus="])
def test_sqlite_rejects_options_without_values(tmp_path: Path, query: str) -> None:
    """A typo'd option with no value is still a typo: it must not be dropped silently."""
    _must_refuse(f"sqlite:///{tmp_path}/x.db?{query}")


def _pragma(path: Path, name: str) -> Any:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def _store_pragma(store: SqliteStore, name: str) -> Any:
    # synchronous and busy_timeout are per connection: ask the store's own connection.
    return store._conn().execute(f"PRAGMA {name}").fetchone()[0]


def test_sqlite_defaults_to_wal_and_full_sync(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/x.db")
    try:
        assert _pragma(tmp_path / "x.db", "journal_mode") == "wal"  # persistent in the file
        assert _store_pragma(store, "synchronous") == 2  # FULL
        assert _store_pragma(store, "busy_timeout") == 10_000
    finally:
        store.close()


@pytest.mark.parametrize("value", ["NORMAL", "normal"])
def test_sqlite_synchronous_normal_is_accepted(tmp_path: Path, value: str) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path}/x.db?synchronous={value}&busy_timeout_ms=250")
    try:
        assert _store_pragma(store, "synchronous") == 1  # NORMAL
        assert _store_pragma(store, "busy_timeout") == 250
        assert _pragma(tmp_path / "x.db", "journal_mode") == "wal"
    finally:
        store.close()


def test_sqlite_relative_url_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqliteStore("sqlite:///sub/dir/rel.db")
    store.close()
    assert (tmp_path / "sub" / "dir" / "rel.db").exists()


def test_sqlite_migrates_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    first = SqliteStore(url)
    first.transact(lambda tx: tx.put_session(a_session(), expected_version=None))
    second = SqliteStore(url)
    try:
        conn = sqlite3.connect(tmp_path / "x.db")
        try:
            versions = [v for (v,) in conn.execute("SELECT version FROM schema_version")]
        finally:
            conn.close()
        assert versions == list(range(1, len(versions) + 1))
        assert len(versions) == len(set(versions)) >= 1
        # Both handles see the same data; the second open did not recreate anything.
        assert second.read(lambda r: r.get_session("s1")) == a_session()
    finally:
        first.close()
        second.close()


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    SqliteStore(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version (version) VALUES (999)")
    conn.commit()
    conn.close()
    with pytest.raises(Exception, match="upgrade fxdurable"):
        SqliteStore(f"sqlite:///{path}")


def test_open_store_picks_sqlite(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    try:
        assert isinstance(store, SqliteStore)
        assert store.url == f"sqlite:///{tmp_path}/x.db"
    finally:
        store.close()


@pytest.mark.parametrize("url", ["mysql://x", "dynamo://table"])
def test_open_store_explains_unsupported_urls(url: str) -> None:
    with pytest.raises(ConfigurationError, match="sqlite:///"):
        open_store(url)


def test_two_handles_on_one_file_serialise_writers(tmp_path: Path) -> None:
    """A conditional write through one handle sees a commit made through another."""
    url = f"sqlite:///{tmp_path}/x.db"
    a, b = SqliteStore(url), SqliteStore(url)
    try:
        a.transact(lambda tx: tx.put_session(a_session(), expected_version=None))
        b.transact(lambda tx: tx.put_session(a_session(version=2), expected_version=1))
        with pytest.raises(ConflictError):
            a.transact(lambda tx: tx.put_session(a_session(version=2), expected_version=1))
    finally:
        a.close()
        b.close()


def test_sqlite_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Workers started together all create the store: switching a new file to WAL makes SQLite
    answer "database is locked" at once to all but one opener, which must retry, not fail."""
    import subprocess
    import sys

    opener = (
        "import sys, time\n"
        "from fxdurable.stores.sqlite import SqliteStore\n"
        "while time.time() < float(sys.argv[2]): pass\n"  # start together
        "SqliteStore(sys.argv[1]).close()\n"
    )
    for attempt in range(4):
        url = f"sqlite:///{tmp_path}/race{attempt}.db"
        start_at = f"{time.time() + 1.0:.3f}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", opener, url, start_at],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
