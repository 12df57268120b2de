"""Record bodies too large for a DynamoDB item, kept in S3 under a content-addressed key.

A body past the threshold is put at ``<s3_prefix>/sha256/p/<partition hash>/<hex>``
*before* the transaction that references it (the item keeps ``p/<partition hash>/<hex>``; an
item written before erasure existed keeps the bare hex, at ``<s3_prefix>/sha256/<hex>``):
the same content is the same object, so a re-put (a rerun body, a retried commit) is
idempotent, and an erase removes a partition's folder (every version of its bodies). A
body read back is resolved by its hash and kept (it can never change). If the transaction
never commits, the object is an orphan no item references: harmless (never read; a retry
re-uses it), removed by the bucket's lifecycle rule on the prefix after the sessions'
retention (docs/dynamodb.md says why not sooner).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from fxdurable.errors import StoreError
from fxdurable.stores._ddb_api import Api
from fxdurable.stores._s3_objects import REFRESH_S, S3Objects

__all__ = ["ITEM_LIMIT", "REFRESH_S", "Blobs", "folder"]

ITEM_LIMIT = 390_000  # bytes of body an item may hold: DynamoDB's 400 KB, less keys and names
_KEEP_BYTES = 32 * 1024 * 1024  # resolved bodies kept (least recently used go first)


def folder(partition: str) -> str:
    """The S3 folder (under ``sha256/``) of one partition's record bodies: ``p/<hash>``, as a
    partition key may hold any character."""
    return "p/" + hashlib.sha256(partition.encode()).hexdigest()[:32]


class Blobs:
    def __init__(self, api: Api) -> None:
        self._api = api
        self._settings = api.settings
        # put, get and delete at content-addressed keys: shared with the Postgres store
        self._objects = S3Objects(
            api.calls,
            api.s3,
            bucket=api.settings.bucket,
            prefix=api.settings.s3_prefix,
            no_bucket=self._no_bucket,
        )
        self._lock = threading.Lock()
        self._held: OrderedDict[str, str] = OrderedDict()
        self._held_bytes = 0

    def offload(self, body: str, what: str, partition: str | None = None) -> str | None:
        """The reference to ``body`` once it is in S3 (its hash, under its partition's folder
        when given), or None when it stays in the item."""
        size = len(body.encode())
        bucket = self._settings.bucket
        if bucket is None or size <= self._settings.offload_threshold:
            if size > ITEM_LIMIT:
                raise StoreError(
                    f"{what} is {size} bytes, more than a DynamoDB item holds (400 KB): give the "
                    "store an S3 bucket for large records, dynamodb://TABLE?bucket=NAME"
                )
            return None
        digest = hashlib.sha256(body.encode()).hexdigest()
        # Under a folder of its partition: an erase removes every version of its records'
        # bodies at once (docs/erasure.md), not only the current one its items name.
        ref = digest if partition is None else f"{folder(partition)}/{digest}"
        self.put_object(ref, body.encode(), "application/json")
        self._hold(ref, body)
        return ref

    def put_object(self, digest: str, data: bytes, content_type: str) -> None:
        """``data`` at its content-addressed key (skipped when this store put it within
        :data:`REFRESH_S`)."""
        self._objects.put(digest, data, content_type)

    def get_object(self, digest: str) -> bytes:
        """The object at ``digest``'s key, verified (raises if missing or damaged)."""
        return self._objects.get(digest)

    def delete_object(self, digest: str) -> None:
        """Remove the object at ``digest``'s key (none there is no error: S3 says so too)."""
        self._objects.delete(digest)
        with self._lock:
            body = self._held.pop(digest, None)
            if body is not None:
                self._held_bytes -= len(body)

    def purge(self, partition: str) -> int:
        """Remove every object under ``partition``'s folder (an erased partition's record
        bodies, each version of each); how many."""
        if self._api.s3 is None:
            return 0
        prefix = self._objects.key(folder(partition)) + "/"
        removed = 0
        pages = self._api.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self._settings.bucket, Prefix=prefix
        )
        for page in pages:
            for obj in page.get("Contents", []):
                self._api.call(
                    self._api.s3, "delete_object", Bucket=self._settings.bucket, Key=obj["Key"]
                )
                removed += 1
        return removed

    def resolve(self, digest: str) -> str:
        with self._lock:
            body = self._held.get(digest)
            if body is not None:
                self._held.move_to_end(digest)
                return body
        body = self.get_object(digest).decode()
        self._hold(digest, body)
        return body

    def _no_bucket(self) -> StoreError:
        return StoreError(
            f"a record of DynamoDB {self._api.where} is in S3 but the store has no bucket: "
            "open it with ?bucket=NAME"
        )

    def _hold(self, digest: str, body: str) -> None:
        with self._lock:
            if digest in self._held:
                return
            self._held[digest] = body
            self._held_bytes += len(body)
            while self._held_bytes > _KEEP_BYTES and len(self._held) > 1:
                _, dropped = self._held.popitem(last=False)
                self._held_bytes -= len(dropped)
