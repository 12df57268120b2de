"""Content-addressed blobs (``store.put_blob``/``get_blob``), run against every backend by the
``store`` fixture (tests/stores/conftest.py): SQLite, Redis, DynamoDB and PostgreSQL with and
without S3.

The requests a blob costs on DynamoDB and Redis are counted at the bottom."""

from __future__ import annotations

import hashlib
import random
import sqlite3
import threading
import time
from typing import Any

import pytest

from fxdurable.core.blobs import MAX_BLOB_BYTES
from fxdurable.core.store import Store
from fxdurable.errors import BlobCorruptError, BlobTooLargeError, StoreError
from fxdurable.stores.sqlite import SqliteStore

MB = 1024 * 1024


def noise(size: int, seed: int = 1) -> bytes:
    """Incompressible bytes, the same for a seed (every byte value occurs)."""
    return random.Random(seed).randbytes(size)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    "data",
    [b"", b"x", bytes(range(256)) * 3, noise(MB), noise(5 * MB, seed=5)],
    ids=["empty", "one-byte", "every-byte", "1MB", "5MB"],
)
def test_a_blob_round_trips_under_its_sha256(store: Store, data: bytes) -> None:
    digest = store.put_blob(data)
    assert digest == sha(data)
    assert store.get_blob(digest) == data


def test_a_put_is_idempotent(store: Store) -> None:
    data = noise(400_000)  # past one DynamoDB item: chunks, or S3 with the bucket
    first = store.put_blob(data)
    assert store.put_blob(data) == first
    assert store.put_blob(bytearray(data)) == first
    assert store.get_blob(first) == data
    other = store.put_blob(b"other")
    assert store.get_blob(other) == b"other"
    assert store.get_blob(first) == data


def test_an_unknown_or_malformed_digest_reads_none(store: Store) -> None:
    store.put_blob(b"something")
    for digest in (sha(b"never put"), "0" * 64, "ABC" * 20, "", "../x", "a" * 63, "a" * 65):
        assert store.get_blob(digest) is None, digest


def test_concurrent_puts_of_one_blob_from_threads(store: Store) -> None:
    data = noise(MB, seed=7)
    barrier = threading.Barrier(6)
    digests: list[str] = []
    errors: list[BaseException] = []

    def put() -> None:
        try:
            barrier.wait()
            digests.append(store.put_blob(data))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert digests == [sha(data)] * 6
    assert store.get_blob(sha(data)) == data


def test_a_blob_past_the_limit_is_refused_and_nothing_stored(store: Store) -> None:
    data = bytes(MAX_BLOB_BYTES + 1)
    with pytest.raises(BlobTooLargeError, match=f"{MAX_BLOB_BYTES + 1} bytes") as caught:
        store.put_blob(data)
    assert caught.value.limit == MAX_BLOB_BYTES
    assert store.get_blob(sha(data)) is None


def test_a_blob_outside_any_transaction_survives_a_rolled_back_one(store: Store) -> None:
    """A caller puts a blob, then commits what names it: a failed commit leaves the blob (an
    orphan nobody reads), never a half of it."""
    digest = store.put_blob(b"kept")

    def body(tx: Any) -> None:
        raise RuntimeError("the referencing commit fails")

    with pytest.raises(RuntimeError):
        store.transact(body)
    assert store.get_blob(digest) == b"kept"


# -- damaged blobs raise, they are never returned ---------------------------------------------


def _corrupt(store: Store, digest: str, data: bytes) -> None:
    """Overwrite what the backend holds for ``digest`` with other bytes of the same size."""
    bad = bytes(b ^ 1 for b in data[:1]) + data[1:]
    name = type(store).__name__
    if name == "SqliteStore":
        assert isinstance(store, SqliteStore)
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE blobs SET data = ? WHERE digest = ?", (bad, digest))
    elif name == "RedisStore":
        key = store._keys.blob(digest)  # type: ignore[attr-defined]
        store._simple([("SET", key, bad)])  # type: ignore[attr-defined]
    elif name == "PostgresStore" and store._settings.s3 is not None:  # type: ignore[attr-defined]
        from pg_s3_support import s3_client

        settings = store._settings.s3  # type: ignore[attr-defined]
        with s3_client(settings.endpoint_url) as s3:
            s3.put_object(Bucket=settings.bucket, Key=f"fxd-blobs/sha256/{digest}", Body=bad)
    elif name == "PostgresStore":
        with store._pool.connection() as conn:  # type: ignore[attr-defined]
            conn.execute("UPDATE blobs SET data = %s WHERE digest = %s", (bad, digest))
    else:
        api = store._api  # type: ignore[attr-defined]
        if api.s3 is not None:
            api.s3.put_object(
                Bucket=api.settings.bucket, Key=f"fxd-blobs/sha256/{digest}", Body=bad
            )
        else:
            api.dynamodb.put_item(
                TableName=api.settings.table,
                Item={
                    "pk": {"S": f"B#{digest}"},
                    "sk": {"S": "#"},
                    "z": {"N": "3"},
                    "d": {"B": bad},
                },
            )


def test_a_corrupted_blob_raises_instead_of_returning_wrong_bytes(store: Store) -> None:
    data = b"the right bytes" * 20  # past the S3 variant's 64-byte threshold: an object
    digest = store.put_blob(data)
    _corrupt(store, digest, data)
    with pytest.raises(BlobCorruptError, match=digest[:16]):
        store.get_blob(digest)


def test_a_closed_store_refuses_blobs(store: Store) -> None:
    store.close()
    with pytest.raises(StoreError):
        store.put_blob(b"late")
    with pytest.raises(StoreError):
        store.get_blob(sha(b"late"))


# -- what a blob costs ------------------------------------------------------------------------


@pytest.mark.aws
def test_dynamodb_blob_requests(moto_server: str) -> None:
    """Counted by botocore's own hook. Without a bucket: inline up to 350 KB (1 PutItem, 1
    Query), chunks past it; with one: S3 past the offload threshold."""
    from aws_support import aws_session
    from dynamo_support import dynamo_store, request_counter

    from fxdurable.stores.dynamodb import DynamoStore

    plain = dynamo_store(moto_server)
    offloading = dynamo_store(moto_server, offload_threshold=65536)
    try:
        small, big = noise(1000), noise(MB, seed=3)
        costs: dict[str, list[str]] = {}
        for label, st, action in [
            ("put small", plain, lambda st: st.put_blob(small)),
            ("get small", plain, lambda st: st.get_blob(sha(small))),
            ("put 1MB chunked", plain, lambda st: st.put_blob(big)),
            ("put 1MB again", plain, lambda st: st.put_blob(big)),
            ("get 1MB chunked", plain, lambda st: st.get_blob(sha(big))),
            ("put 1MB to S3", offloading, lambda st: st.put_blob(big)),
            ("get 1MB from S3", offloading, lambda st: st.get_blob(sha(big))),
        ]:
            with request_counter(st) as calls:
                action(st)
            costs[label] = calls
        # Another process on the same table does not know what this one put.
        other = DynamoStore(plain.url, session=aws_session())
        try:
            with request_counter(other) as calls:
                other.put_blob(big)
            costs["put 1MB known to the table"] = calls
        finally:
            other.close()
    finally:
        plain.close()
        offloading.close()
    assert costs == {
        "put small": ["PutItem"],
        "get small": ["Query"],
        "put 1MB chunked": ["GetItem", "BatchWriteItem", "PutItem"],
        "put 1MB again": [],
        "get 1MB chunked": ["Query", "Query"],  # a Query page holds 1 MB: 3 chunks take two
        "put 1MB to S3": ["GetItem", "PutObject", "PutItem"],
        "get 1MB from S3": ["Query", "GetObject"],
        "put 1MB known to the table": ["GetItem"],
    }


@pytest.mark.redis
def test_redis_blob_round_trips(redis_url: str) -> None:
    from fxdurable.stores.redis import RedisStore

    store = RedisStore(redis_url)
    try:
        before = store._round_trips
        digest = store.put_blob(noise(MB))
        assert store._round_trips - before == 1
        before = store._round_trips
        assert store.get_blob(digest) == noise(MB)
        assert store._round_trips - before == 1
    finally:
        store.close()


@pytest.mark.aws
def test_an_s3_blob_older_than_the_refresh_window_is_written_again(moto_server: str) -> None:
    """The bucket's lifecycle rule expires an object counted from when it was written, while
    its head item stays: a template file shared by every new session would vanish under them.
    A put of a blob whose head is older than REFRESH_S writes the object (and the head) again;
    a fresh head costs one GetItem, as before."""
    from aws_support import aws_session
    from dynamo_support import dynamo_store, request_counter

    from fxdurable.stores._ddb_blobs import REFRESH_S
    from fxdurable.stores.dynamodb import DynamoStore

    first = dynamo_store(moto_server, offload_threshold=64)
    data = noise(MB, seed=5)
    digest = first.put_blob(data)
    api = first._api
    key = {"pk": {"S": f"B#{digest}"}, "sk": {"S": "#"}}
    # What a year does: the lifecycle rule removed the object; the head says it was written
    # more than REFRESH_S ago.
    api.s3.delete_object(Bucket=api.settings.bucket, Key=f"fxd-blobs/sha256/{digest}")
    api.dynamodb.update_item(
        TableName=api.settings.table,
        Key=key,
        UpdateExpression="SET t = :t",
        ExpressionAttributeValues={":t": {"N": str(int(time.time() - REFRESH_S - 60))}},
    )
    later = DynamoStore(first.url, session=aws_session())  # a new process: nothing remembered
    try:
        with request_counter(later) as calls:
            assert later.put_blob(data) == digest
        assert calls == ["GetItem", "PutObject", "PutItem"]
        assert later.get_blob(digest) == data
        head = api.dynamodb.get_item(TableName=api.settings.table, Key=key)["Item"]
        assert time.time() - float(head["t"]["N"]) < 60
        again = DynamoStore(first.url, session=aws_session())
        try:
            with request_counter(again) as calls:
                again.put_blob(data)
            assert calls == ["GetItem"]  # written a moment ago: trusted
        finally:
            again.close()
    finally:
        later.close()
        first.close()
