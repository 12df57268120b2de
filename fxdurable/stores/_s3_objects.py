"""Content-addressed S3 objects: what every store that offloads to S3 shares (DynamoDB's
large record bodies and blobs, PostgreSQL's large blobs).

An object lives at ``<s3_prefix>/sha256/<ref>``, where ``ref`` ends in the sha256 hex of its
bytes (``<hex>``, or ``p/<partition hash>/<hex>`` for a DynamoDB record body under its
partition's folder). The same bytes are the same key, so a re-put is idempotent and a store
puts an object *before* the row or item that names it: a crash in between leaves an orphan
nobody reads, which a later put of the same bytes re-uses. Every object read back is verified
against its hash (:class:`~fxdurable.errors.BlobCorruptError`), and every request goes
through the store's :class:`~fxdurable.stores._aws_calls.AwsCalls` (one error table).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fxdurable.errors import BlobCorruptError
from fxdurable.stores._aws_calls import AwsCalls

__all__ = ["REFRESH_S", "S3Objects"]

_KEEP_PUT = 10_000  # refs remembered as put
# The bucket's lifecycle rule expires an object SessionRetentionDays after it was *written*,
# however recently a new record named it. Content addressing makes a new record name old
# objects (a workspace template's files, shared by every new session; a body a long-lived
# worker put months ago), so a put skipped because "it is there" is only trusted for this
# long: past it the object is written again, and its expiry starts over. A day keeps the
# extra writes rare, and is far below any retention (which is counted in days).
REFRESH_S = 24 * 3600.0


class S3Objects:
    """The objects of one store's bucket. ``client`` is None for a store without a bucket:
    then ``no_bucket()`` is raised by a read or put (a row says its data is in S3, but this
    store was opened without ``?bucket=``) and a delete does nothing."""

    def __init__(
        self,
        calls: AwsCalls,
        client: Any | None,
        *,
        bucket: str | None,
        prefix: str,
        no_bucket: Callable[[], Exception],
    ) -> None:
        self._calls = calls
        self.client = client
        self.bucket = bucket
        self._prefix = prefix
        self._no_bucket = no_bucket
        self._lock = threading.Lock()
        # ref -> when this store put it (time.monotonic()): a re-put within REFRESH_S is skipped
        self._put_done: OrderedDict[str, float] = OrderedDict()

    def key(self, ref: str) -> str:
        return f"{self._prefix}/sha256/{ref}"

    def put(self, ref: str, data: bytes, content_type: str) -> None:
        """``data`` at ``ref``'s key (skipped when this store put it within
        :data:`REFRESH_S`)."""
        with self._lock:
            put_at = self._put_done.get(ref)
        if put_at is not None and time.monotonic() - put_at < REFRESH_S:
            return
        self._calls.call(
            self._client(),
            "put_object",
            Bucket=self.bucket,
            Key=self.key(ref),
            Body=data,
            ContentType=content_type,
        )
        with self._lock:
            self._put_done[ref] = time.monotonic()
            self._put_done.move_to_end(ref)
            while len(self._put_done) > _KEEP_PUT:
                self._put_done.popitem(last=False)

    def get(self, ref: str) -> bytes:
        """The object at ``ref``'s key, verified (raises if missing or damaged)."""
        reply = self._calls.call(
            self._client(), "get_object", Bucket=self.bucket, Key=self.key(ref)
        )
        data: bytes = reply["Body"].read()
        if hashlib.sha256(data).hexdigest() != ref.rsplit("/", 1)[-1]:
            raise BlobCorruptError(
                f"S3 object {self.key(ref)} of {self._calls.service} {self._calls.where} does "
                "not match its hash: the stored copy is damaged; it was not returned"
            )
        return data

    def delete(self, ref: str) -> None:
        """Remove the object at ``ref``'s key (none there is no error: S3 says so too)."""
        if self.client is None:
            return
        self._calls.call(self.client, "delete_object", Bucket=self.bucket, Key=self.key(ref))
        with self._lock:
            self._put_done.pop(ref, None)

    def _client(self) -> Any:
        if self.client is None:
            raise self._no_bucket()
        return self.client
