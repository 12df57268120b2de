"""The store protocol is its primitives: 5 on a transaction and 7 on a store (issue 23 §1;
the deletes of erasure and the blob audit's listing, issue 28).

The named reads and writes are derived once in core (``DerivedTx``); these tests fail when a
backend grows one of its own again (a second derivation that could drift), when the
primitive count grows, and when SQLite's statements built from the kinds' declarations stop
using the indexes its schema made for them (a derived read turned into a scan).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fxdurable.core.kinds import KINDS
from fxdurable.core.store import DerivedReads, DerivedTx, ReadView, Store, Tx
from fxdurable.stores import sqlite as sqlite_store
from fxdurable.stores._by_kind import ByKindTx
from fxdurable.stores._ddb_tx import DynamoTx
from fxdurable.stores._redis_cached_tx import CachedTx
from fxdurable.stores._redis_tx import RedisTx

BACKEND_TXS = [sqlite_store._SqliteTx, RedisTx, CachedTx, DynamoTx]
CORE = {DerivedReads, DerivedTx, ByKindTx, object}

NAMED = {
    name
    for name in {*vars(ReadView), *vars(Tx)}
    if not name.startswith("_") and name not in {"get", "range", "put", "append", "delete"}
}


def _protocol_methods(proto: type) -> set[str]:
    return {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}


def test_the_protocol_is_twelve_primitives() -> None:
    # Nine (issue 23 §1), then erasure's two deletes (issue 28 §3) and the blob audit's
    # listing of blobs (issue 28, `fxdurable check --blobs`).
    assert DerivedTx.__abstractmethods__ == {"get", "range", "put", "append", "delete"}
    assert _protocol_methods(Store) == {
        "transact",
        "read",
        "put_blob",
        "get_blob",
        "delete_blob",
        "blob_digests",
        "close",
    }
    assert len(NAMED) == 24  # derived, every one, from the four


@pytest.mark.parametrize("tx_class", BACKEND_TXS, ids=lambda c: c.__name__)
def test_no_backend_defines_a_named_read_or_write(tx_class: type) -> None:
    assert issubclass(tx_class, DerivedTx)
    for klass in tx_class.__mro__:
        if klass in CORE:
            continue
        own = NAMED & set(vars(klass))
        assert not own, f"{klass.__name__} defines {sorted(own)}: derive them in core"


def test_a_by_kind_backend_missing_a_mapping_fails_when_defined() -> None:
    with pytest.raises(TypeError, match="_range_event_session"):

        class Partial(RedisTx):  # defining it is the test
            _range_event_session = None  # type: ignore[assignment]


def test_every_index_has_its_statement() -> None:
    for kind in KINDS:
        table = sqlite_store._BY_KIND[kind.name]
        for index in kind.indexes:
            assert (index, False, False) in table.ranges
        assert (table.update is None) == (not kind.versioned)


# (kind, index) -> the schema's index each statement must search, never scan
INDEXED = {
    ("session", "active"): "sessions_status",
    ("submission", "request"): "sqlite_autoindex_submissions_2",
    ("submission", "session"): "sqlite_autoindex_submissions_3",
    ("submission", "unsettled"): "submissions_unsettled",
    ("attempt", "submission"): "sqlite_autoindex_attempts_1",
    ("model_call", "turn"): "sqlite_autoindex_model_calls_1",
    ("tool_task", "turn"): "sqlite_autoindex_tool_tasks_2",
    ("tool_task", "turn_round"): "sqlite_autoindex_tool_tasks_2",
    ("tool_task", "session"): "tool_tasks_session",
    ("message", "session"): "sqlite_autoindex_messages_1",
    ("event", "session"): "sqlite_autoindex_events_1",
}


def test_sqlite_statements_search_their_indexes(tmp_path: Path) -> None:
    store = sqlite_store.SqliteStore(f"sqlite:///{tmp_path}/plan.db")
    store.close()
    conn = sqlite3.connect(tmp_path / "plan.db")
    try:
        for (kind_name, index), schema_index in INDEXED.items():
            table = sqlite_store._BY_KIND[kind_name]
            for (name, after, limit), sql in table.ranges.items():
                if name != index:
                    continue
                args = (*(["x"] * sql.count("= ?")), *([1] * after), *([5] * limit))
                plan = " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
                assert schema_index in plan and "SCAN" not in plan, (kind_name, index, plan)
        for kind in KINDS:  # every get is one primary-key (or unique) search
            sql = sqlite_store._BY_KIND[kind.name].get
            args = ["x"] * sql.count("?")
            plan = " ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            assert "SEARCH" in plan and "SCAN" not in plan, (kind.name, plan)
    finally:
        conn.close()
