"""The delete primitives (issue 28 §3, erasure): ``Tx.delete(kind, key)`` and
``Store.delete_blob(digest)``; and ``Store.blob_digests()``, which the blob audit
(``fxdurable check --blobs``) lists what an erase left with.

Part of :class:`~fxdurable.testing.store_contract.StoreContract`. A delete removes the record
and every index entry the store keeps for it, commits with its transaction or not at all,
and is idempotent: deleting what is not there is no error (an erase resumed after a crash
deletes again what it had deleted)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from fxdurable.core.kinds import KINDS, SESSION, SUBMISSION, TOOL_TASK, Key, Kind
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import ReadView, Store, Tx
from fxdurable.testing.store_contract.builders import (
    Boom,
    a_session,
    a_submission,
    a_task,
    look,
    write,
)
from fxdurable.testing.store_contract.primitives import _store_one, one_of_each

__all__ = ["DeleteContract"]


def _indexed(kind: Kind[Any], index: str, value: Key, view: ReadView) -> list[Any]:
    return list(view.range(kind, index, value))


def _put(record: Any, tx: Tx) -> None:
    tx.put(record, expected_version=None)


class DeleteContract:
    """See the module."""

    @pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
    def test_delete_removes_the_record_and_is_idempotent(
        self, store: Store, kind: Kind[Any]
    ) -> None:
        records = one_of_each()
        record = records[kind.name]
        key = kind.key_of(record)
        write(store, lambda tx: _store_one(tx, record))
        assert look(store, lambda r: r.get(kind, key)) == record
        write(store, lambda tx: tx.delete(kind, key))
        assert look(store, lambda r: r.get(kind, key)) is None
        for name, index in kind.indexes.items():
            value = tuple(getattr(record, f) for f in index.match)
            assert store.read(functools.partial(_indexed, kind, name, value)) == []
        write(store, lambda tx: tx.delete(kind, key))  # gone already: no error
        # The key is free again: the same record can be written anew.
        write(store, lambda tx: _store_one(tx, record))
        assert look(store, lambda r: r.get(kind, key)) == record

    def test_delete_leaves_the_other_records(self, store: Store) -> None:
        write(store, lambda tx: tx.put_session(a_session("s1"), expected_version=None))
        write(store, lambda tx: tx.put_session(a_session("s2"), expected_version=None))
        for seq in (1, 2):
            store.transact(functools.partial(_put, a_submission("s1", seq)))
        write(store, lambda tx: tx.put_tool_task(a_task(), expected_version=None))
        write(store, lambda tx: tx.put_tool_task(a_task(index=1), expected_version=None))

        def erase_some(tx: Any) -> None:
            tx.delete(SUBMISSION, ("s1-sub1",))
            tx.delete(TOOL_TASK, (a_task().id,))
            tx.delete(SESSION, ("s2",))

        write(store, erase_some)
        assert [s.id for s in look(store, lambda r: r.list_sessions())] == ["s1"]
        assert [s.id for s in look(store, lambda r: r.active_sessions())] == ["s1"]
        assert [s.seq for s in look(store, lambda r: r.submissions("s1"))] == [2]
        assert [s.seq for s in look(store, lambda r: r.unsettled_submissions("s1"))] == [2]
        assert look(store, lambda r: r.get_submission_by_request("s1-req1")) is None
        assert look(store, lambda r: r.get_submission_by_request("s1-req2")) is not None
        assert [t.index for t in look(store, lambda r: r.tool_tasks("t1"))] == [1]
        assert [t.index for t in look(store, lambda r: r.session_tool_tasks("s1"))] == [1]

    def test_delete_rolls_back_with_its_body(self, store: Store) -> None:
        idle = a_session(status=SessionStatus.IDLE)
        write(store, lambda tx: tx.put_session(idle, expected_version=None))

        def body(tx: Any) -> None:
            tx.delete(SESSION, ("s1",))
            raise Boom

        with pytest.raises(Boom):
            write(store, body)
        assert look(store, lambda r: r.get_session("s1")) == idle

    def test_delete_blob(self, store: Store) -> None:
        kept = store.put_blob(b"kept bytes")
        digest = store.put_blob(b"erased bytes")
        store.delete_blob(digest)
        assert store.get_blob(digest) is None
        assert store.get_blob(kept) == b"kept bytes"
        store.delete_blob(digest)  # gone already: no error
        store.delete_blob("not a digest")
        assert store.put_blob(b"erased bytes") == digest  # put again: there again
        assert store.get_blob(digest) == b"erased bytes"

    def test_blob_digests_list_exactly_the_blobs_held(self, store: Store) -> None:
        assert list(store.blob_digests()) == []
        small = store.put_blob(b"listed bytes")
        # Past one DynamoDB item (chunks, or S3 with a bucket) and every offload threshold.
        large = store.put_blob(bytes(range(256)) * 1600)
        erased = store.put_blob(b"erased, not listed")
        write(store, lambda tx: tx.put_session(a_session("s1"), expected_version=None))
        store.delete_blob(erased)
        # A digest may come twice (Redis's SCAN); none but these, and each of these.
        assert set(store.blob_digests()) == {small, large}
        store.delete_blob(large)
        assert set(store.blob_digests()) == {small}
        store.put_blob(b"erased, not listed")  # put again: listed again
        assert set(store.blob_digests()) == {small, erased}
