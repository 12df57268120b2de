"""The PostgreSQL store's blobs with ``?bucket=`` (stores/_pg_blobs.py): large ones are S3
objects at their content-addressed key, put before the row that names them; small ones stay
in the table. Real PostgreSQL (``postgres_url``) and a real S3 endpoint (``moto_server``);
the faults are real too: a table lock that outlasts ``lock_timeout_ms`` between the object
and its row, an S3 endpoint on a closed port. The contract suites also run on this store
(``postgres-s3`` in tests/stores/conftest.py, 64-byte threshold)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import Any

import pytest
from aws_support import aws_session
from pg_s3_support import pg_s3_url, s3_client
from postgres_support import schema_connection

from fxdurable.errors import BlobCorruptError, ConfigurationError, StoreError, StoreUnavailableError
from fxdurable.stores._pg_blobs import aws_extra_missing
from fxdurable.stores._pg_connect import parse_pg_url
from fxdurable.stores._s3_objects import REFRESH_S
from fxdurable.stores.postgres import PostgresStore
from fxdurable.testing.net import free_port

pytestmark = pytest.mark.aws

THRESHOLD = 1000


def noise(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.fixture
def url(postgres_url: str, moto_server: str) -> str:
    return pg_s3_url(postgres_url, moto_server, THRESHOLD)


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(url, session=aws_session())
    yield s
    s.close()


def _row(url: str, digest: str) -> tuple[Any, ...] | None:
    """(data, s3_written is set) of the blob's row, or None."""
    with schema_connection(url) as conn:
        return conn.execute(
            "SELECT data, s3_written IS NOT NULL FROM blobs WHERE digest = %s", (digest,)
        ).fetchone()


def _keys(url: str) -> list[str]:
    s3 = parse_pg_url(url).s3
    assert s3 is not None
    with s3_client(s3.endpoint_url) as client:
        answer = client.list_objects_v2(Bucket=s3.bucket)
    return sorted(str(o["Key"]) for o in answer.get("Contents", []))


def _object(url: str, digest: str) -> bytes:
    s3 = parse_pg_url(url).s3
    assert s3 is not None
    with s3_client(s3.endpoint_url) as client:
        reply = client.get_object(Bucket=s3.bucket, Key=f"{s3.s3_prefix}/sha256/{digest}")
        return bytes(reply["Body"].read())


def test_a_large_blob_is_an_s3_object_and_its_row_holds_no_bytes(
    store: PostgresStore, url: str
) -> None:
    data = noise(THRESHOLD + 1)
    digest = store.put_blob(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert _keys(url) == [f"fxd-blobs/sha256/{digest}"]  # the DynamoDB store's key for it
    assert _object(url, digest) == data
    assert _row(url, digest) == (None, True)
    assert store.get_blob(digest) == data
    other = PostgresStore(url, session=aws_session())  # another process: row, then S3
    try:
        assert other.get_blob(digest) == data
    finally:
        other.close()


def test_migrate_takes_a_url_with_a_bucket(url: str) -> None:
    from fxdurable.stores._pg_sql import MIGRATIONS
    from fxdurable.stores.postgres import migrate

    PostgresStore(url, session=aws_session()).close()
    assert migrate(url) == (len(MIGRATIONS), len(MIGRATIONS))  # the S3 parameters left out


def test_a_small_blob_stays_in_the_table(store: PostgresStore, url: str) -> None:
    data = noise(THRESHOLD)  # at the threshold: not past it
    digest = store.put_blob(data)
    assert _row(url, digest) == (data, False)
    assert _keys(url) == []
    assert store.get_blob(digest) == data


def test_s3_prefix_names_the_keys(postgres_url: str, moto_server: str) -> None:
    url = pg_s3_url(postgres_url, moto_server, THRESHOLD, s3_prefix="tenant-a/blobs")
    store = PostgresStore(url, session=aws_session())
    try:
        digest = store.put_blob(noise(5000))
        assert _keys(url) == [f"tenant-a/blobs/sha256/{digest}"]
        assert store.get_blob(digest) == noise(5000)
    finally:
        store.close()


def test_a_corrupted_object_raises_and_is_never_returned(store: PostgresStore, url: str) -> None:
    data = noise(4000)
    digest = store.put_blob(data)
    s3 = parse_pg_url(url).s3
    assert s3 is not None
    with s3_client(s3.endpoint_url) as client:
        client.put_object(Bucket=s3.bucket, Key=f"fxd-blobs/sha256/{digest}", Body=b"X" + data[1:])
    with pytest.raises(BlobCorruptError, match=digest):
        store.get_blob(digest)


def test_delete_removes_the_object_and_the_row_and_a_second_delete_is_fine(
    store: PostgresStore, url: str
) -> None:
    big, small = noise(5000), noise(10, seed=2)
    digests = store.put_blob(big), store.put_blob(small)
    for digest in digests:
        store.delete_blob(digest)
        store.delete_blob(digest)  # idempotent: an erase resumed after a crash deletes again
        assert _row(url, digest) is None
        assert store.get_blob(digest) is None
    assert _keys(url) == []
    # Put again after the delete: this store put it before, but it is gone; written anew.
    assert store.get_blob(store.put_blob(big)) == big
    assert len(_keys(url)) == 1


def test_an_object_left_by_a_put_whose_row_failed_is_harmless_and_reused(url: str) -> None:
    """A real fault between the two writes: another session holds the blobs table locked
    (reads pass, inserts wait) past the store's lock_timeout_ms, so the object is put and the
    row is not. The put raises StoreUnavailableError; the orphan is never read; a later put
    of the same bytes writes the same key and the row, and a delete removes even an orphan."""
    impatient = PostgresStore(url + "&lock_timeout_ms=200", session=aws_session())
    data = noise(6000, seed=3)
    digest = hashlib.sha256(data).hexdigest()
    try:
        with schema_connection(url) as holder, holder.transaction():
            holder.execute("LOCK TABLE blobs IN EXCLUSIVE MODE")
            with pytest.raises(StoreUnavailableError, match="lock_timeout_ms"):
                impatient.put_blob(data)
        assert _keys(url) == [f"fxd-blobs/sha256/{digest}"]  # the orphan
        assert _row(url, digest) is None
        assert impatient.get_blob(digest) is None  # no row names it: never read
        assert impatient.put_blob(data) == digest
        assert _keys(url) == [f"fxd-blobs/sha256/{digest}"]  # the same object
        assert _row(url, digest) == (None, True)
        assert impatient.get_blob(digest) == data
        # An orphan of bytes being erased goes too: a delete with no row removes the object.
        orphan = noise(7000, seed=4)
        with schema_connection(url) as holder, holder.transaction():
            holder.execute("LOCK TABLE blobs IN EXCLUSIVE MODE")
            with pytest.raises(StoreUnavailableError):
                impatient.put_blob(orphan)
        orphan_digest = hashlib.sha256(orphan).hexdigest()
        assert f"fxd-blobs/sha256/{orphan_digest}" in _keys(url)
        impatient.delete_blob(orphan_digest)
        assert _keys(url) == [f"fxd-blobs/sha256/{digest}"]
    finally:
        impatient.close()


def test_s3_down_is_store_unavailable_and_leaves_no_row(
    store: PostgresStore, url: str, postgres_url: str
) -> None:
    kept = store.put_blob(noise(5000, seed=5))  # an S3 blob written while S3 was up
    s3 = parse_pg_url(url).s3
    assert s3 is not None
    down_url = (  # the same schema and bucket, S3 at a port nothing listens on
        f"{postgres_url}&bucket={s3.bucket}&region={s3.region}&offload_threshold={THRESHOLD}"
        f"&endpoint_url=http://127.0.0.1:{free_port()}&retry_budget_s=0"
    )
    down = PostgresStore(down_url, session=aws_session())
    try:
        data = noise(8000, seed=6)
        with pytest.raises(StoreUnavailableError, match="put_object on S3 bucket") as caught:
            down.put_blob(data)
        assert "nothing was written" in str(caught.value)
        assert _row(url, hashlib.sha256(data).hexdigest()) is None  # nothing half-written
        with pytest.raises(StoreUnavailableError, match="get_object on S3 bucket"):
            down.get_blob(kept)
        assert down.get_blob(down.put_blob(b"small")) == b"small"  # the table still works
    finally:
        down.close()


def test_a_store_without_the_bucket_refuses_an_s3_blob_naming_the_fix(
    store: PostgresStore, url: str, postgres_url: str
) -> None:
    digest = store.put_blob(noise(5000))
    plain = PostgresStore(postgres_url)  # the same schema, no bucket
    try:
        with pytest.raises(StoreError, match=r"opened without a bucket: open it with \?bucket="):
            plain.get_blob(digest)
        with pytest.raises(StoreError, match="without a bucket"):
            plain.delete_blob(digest)  # an erase must not drop the row and keep the object
        assert plain.put_blob(noise(5000)) == digest  # its row exists: nothing written
    finally:
        plain.close()
    assert store.get_blob(digest) == noise(5000)


def test_an_object_older_than_the_refresh_window_is_written_again(url: str) -> None:
    """The bucket's lifecycle rule expires an object counted from its write while its row
    stays: a put of a blob whose row says it was written more than REFRESH_S ago writes the
    object (and s3_written) again."""
    first = PostgresStore(url, session=aws_session())
    data = noise(5000, seed=8)
    digest = first.put_blob(data)
    first.close()
    s3 = parse_pg_url(url).s3
    assert s3 is not None
    with s3_client(s3.endpoint_url) as client:  # what a year does: the rule removed it
        client.delete_object(Bucket=s3.bucket, Key=f"fxd-blobs/sha256/{digest}")
    with schema_connection(url) as conn:
        conn.execute(
            "UPDATE blobs SET s3_written = now() - make_interval(secs => %s) WHERE digest = %s",
            (REFRESH_S + 60, digest),
        )
    later = PostgresStore(url, session=aws_session())  # a new process: nothing remembered
    try:
        assert later.put_blob(data) == digest
        assert later.get_blob(digest) == data
        with schema_connection(url) as conn:
            row = conn.execute(
                "SELECT now() - s3_written < interval '1 minute' FROM blobs WHERE digest = %s",
                (digest,),
            ).fetchone()
        assert row == (True,)
    finally:
        later.close()


# -- URLs and the missing extra (no server needed) -------------------------------------------


def test_the_s3_parameters_are_the_dynamodb_stores_and_stay_out_of_libpq() -> None:
    s = parse_pg_url(
        "postgresql://u@h/db?schema=s1&bucket=my-bucket&sslmode=disable&endpoint_url="
        "http://127.0.0.1:9000&region=eu-west-1"
    )
    assert s.conninfo == "postgresql://u@h/db?sslmode=disable"
    assert s.s3 is not None
    assert (s.s3.bucket, s.s3.s3_prefix, s.s3.offload_threshold, s.s3.retry_budget_s) == (
        "my-bucket",
        "fxd-blobs",
        65536,
        10.0,
    )
    assert (s.s3.region, s.s3.endpoint_url) == ("eu-west-1", "http://127.0.0.1:9000")
    assert parse_pg_url("postgresql://u@h/db").s3 is None
    for bad, says in [
        ("s3_prefix=x", "only apply with an S3 bucket"),
        ("bucket=Bad_Name", "not an S3 bucket name"),
        ("bucket=ok-bucket&offload_threshold=0", "offload_threshold must be 1 to"),
        ("bucket=ok-bucket&endpoint_url=ftp://x", "endpoint_url must be an http"),
    ]:
        with pytest.raises(ConfigurationError, match=says):
            parse_pg_url(f"postgresql://u@h/db?{bad}")


def test_a_bucket_without_boto3_names_the_extra() -> None:
    """boto3 is installed here, so the error is checked where it is made."""
    error = aws_extra_missing("h:5432/db schema fxdurable")
    assert isinstance(error, ConfigurationError)
    assert "pip install 'fxdurable[aws]'" in str(error)
    assert "?bucket=" in str(error)
