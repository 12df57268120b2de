"""The DynamoDB store's content-addressed blobs (``put_blob``/``get_blob``/``delete_blob``/
``blob_digests``): items of a partition per digest, or an S3 object behind one.

Layout (see :mod:`fxdurable.stores.dynamodb`)::

    B#<sha256 hex>   #            the head: ``z`` size, and ``d`` the bytes (inline),
                                  ``o`` = 1 (the bytes are the S3 object of the digest) with
                                  ``t`` when it was written (epoch seconds), or
                                  ``n`` the number of chunk items
    B#<sha256 hex>   C#<i:06d>    chunk i: ``d``, up to CHUNK_BYTES of the bytes

Which one: a blob up to the store's ``offload_threshold`` (with a bucket) or up to
:data:`CHUNK_BYTES` (without) is inline; a larger one goes to S3 when the store has a bucket
(the same key a record body of those bytes would have), and into chunk items when it has
none, so a store without a bucket still holds blobs up to ``MAX_BLOB_BYTES``. The head is
written last, after the S3 object or every chunk: a head that exists proves the rest does,
and a put that died half-way leaves only what no reader looks at (a later put rewrites the
same bytes). A read is one strongly consistent ``Query`` of the partition (pages of 1 MB),
plus the ``GetObject`` of an offloaded one; every read is verified against the digest.

Listing (``blob_digests``, for ``fxdurable check --blobs`` only). Each blob is a partition of
its own, so no ``Query`` reaches them all: it is a strongly consistent, paginated ``Scan`` of
the table filtered to the heads (``begins_with(pk, "B#") AND sk = "#"``) and projected to
``pk``. A Scan reads (and is billed for) every item of the table, records included (the
filter applies after the read): strongly consistent, 1 RCU per 4 KB read, O(items) once per
audit. An offloaded blob is listed by its head, which
names its S3 object; chunks or an object whose head was never written (a put that died
half-way) are no blob (``get_blob`` answers None) and are not listed.

Requests (counted by ``store.requests``, stated by tests/stores/test_store_blobs.py): an inline
put is 1 ``PutItem``; a larger put first asks whether the head exists (1 ``GetItem``; a blob
already stored costs nothing more), then 1 ``PutObject`` or one ``BatchWriteItem`` per 25
chunks, then the head's ``PutItem``. A digest this store put before costs 0.

An S3 object expires by the bucket's lifecycle rule, counted from when it was written, while
its head stays: an S3-backed blob whose head is older than
:data:`~fxdurable.stores._ddb_blobs.REFRESH_S` is written again by the next put (the object and
the head's ``t``), so a session that names it now can read it for the whole retention.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from fxdurable.core.blobs import blob_digest, is_digest, verified
from fxdurable.errors import BlobCorruptError
from fxdurable.stores._ddb_api import Api
from fxdurable.stores._ddb_blobs import REFRESH_S, Blobs

__all__ = ["CHUNK_BYTES", "BlobItems"]

CHUNK_BYTES = 350_000  # bytes of a blob one item holds: under 400 KB with its keys
_KEEP_PUT = 10_000  # digests this store remembers having put (a re-put costs nothing)


def _pk(digest: str) -> str:
    return f"B#{digest}"


class BlobItems:
    def __init__(self, api: Api, objects: Blobs) -> None:
        self._api = api
        self._objects = objects
        self._settings = api.settings
        self._lock = threading.Lock()
        # digest -> when this store put it (time.monotonic()): re-puts within REFRESH_S cost 0
        self._put_done: OrderedDict[str, float] = OrderedDict()

    def put(self, data: bytes) -> str:
        digest = blob_digest(data)
        data = bytes(data)
        with self._lock:
            put_at = self._put_done.get(digest)
        if put_at is not None and time.monotonic() - put_at < REFRESH_S:
            return digest
        head: dict[str, Any] = {"z": {"N": str(len(data))}}
        if len(data) <= self._inline_limit():
            head["d"] = {"B": data}
        elif self._stored_and_fresh(digest):
            self._remember(digest)
            return digest
        elif self._settings.bucket is not None:
            self._objects.put_object(digest, data, "application/octet-stream")
            head["o"] = {"N": "1"}
            head["t"] = {"N": str(int(time.time()))}
        else:
            chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]
            self._api.batch_write(
                [self._item(digest, f"C#{i:06d}", {"d": {"B": c}}) for i, c in enumerate(chunks)]
            )
            head["n"] = {"N": str(len(chunks))}
        self._api.call(
            self._api.dynamodb,
            "put_item",
            TableName=self._settings.table,
            Item=self._item(digest, "#", head),
        )
        self._remember(digest)
        return digest

    def get(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        items = self._api.query_raw(_pk(digest))
        if not items or items[0]["sk"]["S"] != "#":
            return None  # no blob, or a put that never wrote its head
        head = items[0]
        where = f"DynamoDB {self._api.where}"
        if "d" in head:
            data = bytes(head["d"]["B"])
        elif "o" in head:
            data = self._objects.get_object(digest)
        else:
            chunks = [bytes(item["d"]["B"]) for item in items[1:]]
            if len(chunks) != int(head["n"]["N"]):
                raise BlobCorruptError(
                    f"blob {digest} in {where} has {len(chunks)} of its {head['n']['N']} chunks"
                )
            data = b"".join(chunks)
        return verified(digest, data, where)

    def delete(self, digest: str) -> None:
        """Remove the blob's head and chunks, and its S3 object when it has one."""
        if not is_digest(digest):
            return
        items = self._api.query_raw(_pk(digest))
        if any("o" in item for item in items):
            self._objects.delete_object(digest)
        for item in items:
            self._api.call(
                self._api.dynamodb,
                "delete_item",
                TableName=self._settings.table,
                Key={"pk": item["pk"], "sk": item["sk"]},
            )
        with self._lock:
            self._put_done.pop(digest, None)

    def digests(self) -> Iterator[str]:
        """Every blob's digest, a Scan page at a time (see the module)."""
        params: dict[str, Any] = {
            "TableName": self._settings.table,
            "FilterExpression": "begins_with(pk, :b) AND sk = :head",
            "ProjectionExpression": "pk",
            "ExpressionAttributeValues": {":b": {"S": _pk("")}, ":head": {"S": "#"}},
            "ConsistentRead": True,
        }
        while True:
            reply = self._api.call(self._api.dynamodb, "scan", **params)
            for item in reply.get("Items", []):
                digest = item["pk"]["S"][len(_pk("")) :]
                if is_digest(digest):
                    yield digest
            last = reply.get("LastEvaluatedKey")
            if not last:
                return
            params["ExclusiveStartKey"] = last

    def _inline_limit(self) -> int:
        if self._settings.bucket is None:
            return CHUNK_BYTES
        return self._settings.offload_threshold

    def _stored_and_fresh(self, digest: str) -> bool:
        """The blob's head exists and, if its bytes are an S3 object, that object was written
        within REFRESH_S (an older one may be near its lifecycle expiry: write it again)."""
        reply = self._api.call(
            self._api.dynamodb,
            "get_item",
            TableName=self._settings.table,
            Key={"pk": {"S": _pk(digest)}, "sk": {"S": "#"}},
            ConsistentRead=True,
            ProjectionExpression="pk, o, t",
        )
        head = reply.get("Item")
        if head is None:
            return False
        if "o" not in head:
            return True  # chunk items have no expiry
        written = float(head["t"]["N"]) if "t" in head else 0.0
        return time.time() - written < REFRESH_S

    def _item(self, digest: str, sk: str, attributes: dict[str, Any]) -> dict[str, Any]:
        return {"pk": {"S": _pk(digest)}, "sk": {"S": sk}, **attributes}

    def _remember(self, digest: str) -> None:
        with self._lock:
            self._put_done[digest] = time.monotonic()
            self._put_done.move_to_end(digest)
            while len(self._put_done) > _KEEP_PUT:
                self._put_done.popitem(last=False)
