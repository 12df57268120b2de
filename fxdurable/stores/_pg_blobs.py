"""The PostgreSQL store's content-addressed blobs (``put_blob``/``get_blob``/``delete_blob``/
``blob_digests``): rows of the ``blobs`` table, and, when the URL names a bucket, S3 objects
behind the large ones.

Layout. ``blobs (digest, data, s3_written)``: a row holds either the bytes (``data``) or, for
a blob past ``offload_threshold`` (65536 bytes by default) in a store with ``?bucket=``,
``data`` NULL and ``s3_written`` (when the object was last written, the server's clock): the
bytes are the S3 object ``<s3_prefix>/sha256/<digest>``, the key the DynamoDB store gives a
blob of the same bytes (:mod:`._s3_objects`, shared with it, as are the URL parameters,
:mod:`._aws_options`, and the error table, :mod:`._aws_calls`).

Order. A large blob's object is put *before* its row: a row that says "in S3" proves the
object was written, and a crash between the two leaves an orphan object no row names (never
read; a later put of the same bytes writes the same key again). A delete (erasure) removes
the object first, then the row, so a delete cut short is finished by the next one; a delete
of a digest with no row removes its object too (an orphan of the same bytes is still the
data being erased).

Listing. ``blob_digests`` pages through the rows by primary key
(:data:`~fxdurable.core.blobs.DIGEST_PAGE` a short transaction): a row is a blob, wherever its
bytes are. An object no row names (a put that died before its row) is not listed: it is no
blob of the store (``get_blob`` answers None for it), and the bucket's lifecycle rule expires
it.

Lifecycle. A bucket's lifecycle rule expires an object counted from when it was written, while
its row stays: a put of a blob whose row is older than
:data:`~fxdurable.stores._s3_objects.REFRESH_S` writes the object and ``s3_written`` again, as
the DynamoDB store does, so a blob a new session names stays readable for the retention.

boto3 is imported only when the URL names a bucket: the postgres extra does not need it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fxdurable.core.blobs import blob_digest, by_page, is_digest, verified
from fxdurable.errors import ConfigurationError, StoreError
from fxdurable.stores._aws_options import AwsOptions

if TYPE_CHECKING:  # botocore loads only for a store with a bucket
    from fxdurable.stores._s3_objects import S3Objects

__all__ = ["PgBlobs", "aws_extra_missing"]

Short = Callable[[Callable[[Any], None], str], None]  # (body(conn), doing): one short tx

_KEEP_PUT = 10_000  # digests this store remembers having put (a re-put costs nothing)
_INSERT = "INSERT INTO blobs (digest, data) VALUES (%s, %s) ON CONFLICT DO NOTHING"
# The object was just (re)written: a row in S3 takes the new time; an inline row of the same
# bytes (put by a store without a bucket, or with a higher threshold) stays as it is.
_INSERT_IN_S3 = (
    "INSERT INTO blobs (digest, data, s3_written) VALUES (%s, NULL, now()) "
    "ON CONFLICT (digest) DO UPDATE SET s3_written = EXCLUDED.s3_written "
    "WHERE blobs.s3_written IS NOT NULL"
)
_FRESH = (
    "SELECT s3_written IS NULL OR s3_written > now() - make_interval(secs => %s) "
    "FROM blobs WHERE digest = %s"
)


def aws_extra_missing(where: str) -> ConfigurationError:
    """The error of a ``?bucket=`` URL in an installation without boto3."""
    return ConfigurationError(
        f"PostgreSQL store {where} names an S3 bucket (?bucket=), which needs boto3: "
        "pip install 'fxdurable[aws]' (or drop ?bucket= to keep every blob in the table)"
    )


def _open_s3(options: AwsOptions, where: str, session: Any) -> S3Objects:
    try:
        import boto3
    except ImportError:
        raise aws_extra_missing(where) from None
    from fxdurable.stores._aws_calls import AwsCalls, aws_client
    from fxdurable.stores._s3_objects import S3Objects

    bucket = options.bucket
    at = f" at {options.endpoint_url}" if options.endpoint_url else ""
    calls = AwsCalls(
        service="S3",
        where=f"bucket {bucket!r}{at} of PostgreSQL store {where}",
        retry_budget_s=options.retry_budget_s,
        docs="docs/postgres.md",
    )
    client = aws_client(
        session or boto3,
        "s3",
        region=options.region,
        endpoint_url=options.endpoint_url,
        store=f"PostgreSQL store's bucket {bucket!r}",
    )
    return S3Objects(
        calls,
        client,
        bucket=bucket,
        prefix=options.s3_prefix,
        no_bucket=lambda: StoreError(f"no bucket for {where}"),
    )


class PgBlobs:
    """``short(body, doing)`` runs ``body(conn)`` as one short transaction, again on a new
    connection after a lost one (every body here is idempotent)."""

    def __init__(
        self, options: AwsOptions | None, short: Short, where: str, session: Any = None
    ) -> None:
        self._short = short
        self._where = where
        self._threshold = options.offload_threshold if options else 0
        self._s3 = _open_s3(options, where, session) if options else None
        self._lock = threading.Lock()
        # digest -> when this store put it (time.monotonic()): re-puts within REFRESH_S cost 0
        self._put_done: OrderedDict[str, float] = OrderedDict()

    def close(self) -> None:
        if self._s3 is not None and self._s3.client is not None:
            self._s3.client.close()

    def put(self, data: bytes) -> str:
        digest = blob_digest(data)
        data = bytes(data)
        if self._s3 is None or len(data) <= self._threshold:
            # idempotent: a retry after a lost COMMIT is safe
            self._short(lambda conn: conn.execute(_INSERT, (digest, data)), "storing a blob")
            return digest
        from fxdurable.stores._s3_objects import REFRESH_S

        with self._lock:
            put_at = self._put_done.get(digest)
        if put_at is not None and time.monotonic() - put_at < REFRESH_S:
            return digest
        if not self._stored_and_fresh(digest, REFRESH_S):
            self._s3.put(digest, data, "application/octet-stream")  # before the row names it
            self._short(lambda conn: conn.execute(_INSERT_IN_S3, (digest,)), "storing a blob")
        with self._lock:
            self._put_done[digest] = time.monotonic()
            self._put_done.move_to_end(digest)
            while len(self._put_done) > _KEEP_PUT:
                self._put_done.popitem(last=False)
        return digest

    def get(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        row = self._row(digest, "SELECT data FROM blobs WHERE digest = %s", "reading a blob")
        if row is None:
            return None
        if row[0] is not None:
            return verified(digest, bytes(row[0]), self._where)
        return self._objects(digest).get(digest)  # verified against the digest there

    def delete(self, digest: str) -> None:
        if not is_digest(digest):
            return
        row = self._row(
            digest, "SELECT s3_written IS NOT NULL FROM blobs WHERE digest = %s", "deleting a blob"
        )
        if row is not None and row[0]:
            self._objects(digest).delete(digest)  # first: a delete cut short is redone
        elif row is None and self._s3 is not None:
            # No row: a put that died between its object and its row may have left the object.
            self._s3.delete(digest)
        self._short(
            lambda conn: conn.execute("DELETE FROM blobs WHERE digest = %s", (digest,)),
            "deleting a blob",
        )  # idempotent: a retry deletes nothing more
        with self._lock:
            self._put_done.pop(digest, None)

    def digests(self) -> Iterator[str]:
        return by_page(self._digests_after)

    def _digests_after(self, last: str, limit: int) -> list[str]:
        found: list[str] = []

        def body(conn: Any) -> None:
            rows = conn.execute(
                "SELECT digest FROM blobs WHERE digest > %s ORDER BY digest LIMIT %s",
                (last, limit),
            ).fetchall()
            found[:] = [digest for (digest,) in rows]

        self._short(body, "listing blobs")
        return found

    def _stored_and_fresh(self, digest: str, refresh_s: float) -> bool:
        """The blob's row exists and, if its bytes are in S3, the object was written within
        ``refresh_s`` (an older one may be near its lifecycle expiry: write it again)."""
        row = self._row(digest, _FRESH, "storing a blob", refresh_s)
        return row is not None and bool(row[0])

    def _row(self, digest: str, sql: str, doing: str, *first: object) -> tuple[Any, ...] | None:
        found: list[tuple[Any, ...] | None] = []

        def body(conn: Any) -> None:
            found[:] = [conn.execute(sql, (*first, digest)).fetchone()]

        self._short(body, doing)
        return found[0] if found else None

    def _objects(self, digest: str) -> S3Objects:
        if self._s3 is None:
            raise StoreError(
                f"blob {digest} of PostgreSQL store {self._where} is in S3, but the store was "
                "opened without a bucket: open it with ?bucket=NAME (and the s3_prefix= it "
                "was written with)"
            )
        return self._s3
