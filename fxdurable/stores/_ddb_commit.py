"""The commit of the DynamoDB store: one ``TransactWriteItems`` per transaction.

Its items, each with the condition that makes the whole commit hold or nothing be written:

- the head of every versioned partition the body wrote: ``ADD sv 1`` (with a session's
  record, when the body wrote it), on condition ``sv = :v`` if the body relied on version
  *v* of the partition (what it read there is unchanged), plus the record's own condition;
- a ``ConditionCheck`` ``sv = :v`` on the head of every partition the body read and did not
  write;
- every other write (``Put``/``Delete``), with its record condition when the body did not
  know the record: ``attribute_not_exists(pk)`` for an insert, ``v = :e`` for an update;
- a ``ConditionCheck`` ``attribute_not_exists(pk)`` on each pointer or request id the body
  read absent and does not write.

DynamoDB cancels the commit if any condition fails, and names which (``CancellationReasons``,
in item order): a version condition means another writer got there first, so the body runs
again from fresh reads (so does a stale fence: the rerun reads the new token and the journal
raises :class:`~fxdurable.errors.LeaseLostError`); a record condition the caller asserted
blind raises :class:`~fxdurable.errors.ConflictError`; ``TransactionConflict`` (another
transaction in flight on an item) runs again too.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any

from fxdurable.core.crash import crash_point
from fxdurable.errors import ConflictError, StoreError
from fxdurable.stores._ddb_api import Api, Cancelled
from fxdurable.stores._ddb_blobs import Blobs
from fxdurable.stores._ddb_cache import Caches
from fxdurable.stores._ddb_items import HEAD, Item, Key, to_wire, versioned
from fxdurable.stores._ddb_reads import Reads
from fxdurable.stores._ddb_tx import Write

__all__ = ["MAX_ITEMS", "Rerun", "commit"]

MAX_ITEMS = 100  # TransactWriteItems' limit
MAX_BYTES = 4_000_000  # and its 4 MB


class Rerun(Exception):
    """What the body read changed before its commit: run it again from fresh reads."""


@dataclasses.dataclass(slots=True)
class _Entry:
    request: dict[str, Any]
    rerun: bool  # its condition failing means "changed since it was read"
    what: str


def commit(api: Api, blobs: Blobs, caches: Caches, reads: Reads, writes: dict[Key, Write]) -> None:
    """Commit ``writes`` with one ``TransactWriteItems`` whose conditions are what ``reads``
    relied on; then move the caches on. Raises :class:`Rerun` or ConflictError."""
    table = api.settings.table
    size = 0
    offloaded = False
    for write in writes.values():
        if write.item is not None and write.item.body is not None:
            write.item.ref = blobs.offload(write.item.body, write.what)  # before the commit
            if write.item.ref is None:
                size += len(write.item.body.encode())
            offloaded = offloaded or write.item.ref is not None
    if size > MAX_BYTES:
        raise StoreError(
            f"a transaction of {size} bytes is more than DynamoDB commits at once (4 MB): give "
            "the store an S3 bucket (?bucket=NAME) or a lower ?offload_threshold="
        )
    entries: list[_Entry] = []
    heads: dict[Key, Item] = {}
    written = {key[0] for key in writes if versioned(key[0])}
    for pk in sorted(written):
        entries.append(_head_update(table, pk, reads, writes.get((pk, HEAD)), heads))
    for pk in sorted(set(reads.used) - written):
        condition, values = _version_condition(reads.used[pk])
        check = {"TableName": table, "Key": _key((pk, HEAD)), "ConditionExpression": condition}
        if values:
            check["ExpressionAttributeValues"] = values
        entries.append(_Entry({"ConditionCheck": check}, True, f"partition {pk!r}"))
    for key, write in writes.items():
        if key[1] == HEAD and versioned(key[0]):
            continue
        entries.append(_record_write(table, key, write))
    for key in sorted(reads.absent_fixed - set(writes)):
        check = {
            "TableName": table,
            "Key": _key(key),
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        entries.append(_Entry({"ConditionCheck": check}, True, f"{key[0]!r}"))
    if len(entries) > MAX_ITEMS:
        raise StoreError(
            f"a transaction of {len(entries)} items is more than DynamoDB commits at once "
            f"({MAX_ITEMS}): write fewer records per transition"
        )
    if offloaded:
        crash_point("store.after-offload")
    try:
        api.transact([e.request for e in entries], secrets.token_hex(16))
    except Cancelled as cancelled:
        _cancelled(cancelled, entries, caches, reads)
    done: dict[Key, Item | None] = {k: w.item for k, w in writes.items()}
    done.update(heads)
    caches.advance(reads.used, done)
    for key, write in writes.items():
        if not versioned(key[0]) and write.item is not None and write.item.target is not None:
            caches.learn(write.item)


def _cancelled(cancelled: Cancelled, entries: list[_Entry], caches: Caches, reads: Reads) -> None:
    failed = [
        entry
        for entry, code in zip(entries, cancelled.codes, strict=False)
        if code == "ConditionalCheckFailed"
    ]
    busy = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
    if any(e.rerun for e in failed) or (not failed and busy & set(cancelled.codes)):
        caches.drop(reads.used)
        if not failed:
            time.sleep(0.01)
        raise Rerun
    if failed:
        what = failed[0].what
        raise ConflictError(f"{what}: the stored record is not the one this write expected")
    raise StoreError(f"DynamoDB cancelled the commit: {cancelled}")


def _version_condition(version: int) -> tuple[str, dict[str, Any]]:
    if version == 0:
        return "attribute_not_exists(sv)", {}
    return "sv = :sv", {":sv": {"N": str(version)}}


def _head_update(
    table: str, pk: str, reads: Reads, write: Write | None, heads: dict[Key, Item]
) -> _Entry:
    """``ADD sv 1`` on a partition's head, with the session record when the body wrote it."""
    conditions, values = [], {":one": {"N": "1"}}
    names: dict[str, str] = {}
    relied = pk in reads.used
    if relied:
        condition, more = _version_condition(reads.used[pk])
        conditions.append(condition)
        values.update(more)
    update = "ADD sv :one"
    what = f"partition {pk!r}"
    if write is not None and write.item is not None:
        item = write.item
        field = "o" if item.ref is not None else "b"
        other = "b" if field == "o" else "o"
        values[":body"] = {"S": item.ref if item.ref is not None else item.body or ""}
        values[":ver"] = {"N": str(item.ver)}
        names["#v"] = "v"
        update = f"SET {field} = :body, #v = :ver REMOVE {other} ADD sv :one"
        what = write.what
        if write.absent:
            conditions.append("attribute_not_exists(#v)")
        elif write.expect is not None:
            conditions.append("#v = :expect")
            values[":expect"] = {"N": str(write.expect)}
        if relied:
            heads[(pk, HEAD)] = dataclasses.replace(item, sv=reads.used[pk] + 1)
    request: dict[str, Any] = {
        "TableName": table,
        "Key": _key((pk, HEAD)),
        "UpdateExpression": update,
        "ExpressionAttributeValues": values,
    }
    if names:
        request["ExpressionAttributeNames"] = names
    if conditions:
        request["ConditionExpression"] = " AND ".join(conditions)
    # Relied on: a failure may be the version moving, which a fresh run tells apart.
    return _Entry({"Update": request}, relied, what)


def _record_write(table: str, key: Key, write: Write) -> _Entry:
    request: dict[str, Any] = {"TableName": table}
    if write.item is None:
        request["Key"] = _key(key)
    else:
        request["Item"] = to_wire(write.item)
    if write.absent:
        request["ConditionExpression"] = "attribute_not_exists(pk)"
    elif write.expect is not None:
        request["ConditionExpression"] = "#v = :expect"
        request["ExpressionAttributeNames"] = {"#v": "v"}
        request["ExpressionAttributeValues"] = {":expect": {"N": str(write.expect)}}
    operation = "Delete" if write.item is None else "Put"
    return _Entry({operation: request}, write.reread, write.what)


def _key(key: Key) -> dict[str, Any]:
    return {"pk": {"S": key[0]}, "sk": {"S": key[1]}}
