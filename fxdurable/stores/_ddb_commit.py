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
in item order). Whatever the reason, the store drops what the body read (the caches of every
partition it relied on or wrote) and the body runs again from fresh reads, a bounded number
of times (:class:`Rerun`): a version condition means another writer got there first; a stale
fence makes the rerun read the new token, and the journal raises
:class:`~fxdurable.errors.LeaseLostError`; a record condition the body wrote blind (it had
not read the record) marks that record *suspect*, so the rerun reads it before writing it and
decides on what is stored — a record that really is there raises
:class:`~fxdurable.errors.ConflictError` from the body, instead of the same blind write being
recomputed and cancelled again; ``TransactionConflict`` (another transaction in flight on an
item) runs again too. Nothing cancelled is ever retried from what the cancelled run read.

**Unknown outcomes.** Every head update also sets ``tok``, the commit's
``ClientRequestToken``. A commit whose answer is lost (a reset connection, a read timeout) is
sent again with the same token (:mod:`._ddb_api`; DynamoDB applies a token at most once in
ten minutes); if it is then cancelled (an emulator without token idempotency cancels the
resend of a commit that landed) or can still not be confirmed, the heads are read again:
one that holds this commit's token proves it landed (all or nothing), and the commit stands.
An outcome still unknown raises :class:`~fxdurable.errors.StoreUnavailableError`. Either way
the caches of what it touched are dropped, as after a cancelled commit: nothing is built on
what a commit wrote unless its answer said it applied at the version the body relied on, so
the next read (the lease holder's first after it included) and the next transition read
afresh (tests/stores/test_dynamodb_lost_commit.py).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any

from fxdurable.core import optimistic
from fxdurable.core.crash import crash_point
from fxdurable.core.records import SessionRecord
from fxdurable.errors import StoreError, StoreUnavailableError
from fxdurable.stores._ddb_api import Api, Cancelled
from fxdurable.stores._ddb_blobs import Blobs
from fxdurable.stores._ddb_cache import Caches
from fxdurable.stores._ddb_items import HEAD, Item, Key, to_wire, versioned
from fxdurable.stores._ddb_reads import Reads
from fxdurable.stores._ddb_stage import stage
from fxdurable.stores._ddb_tx import Write

__all__ = ["MAX_ITEMS", "Rerun", "commit"]

MAX_ITEMS = 100  # TransactWriteItems' limit
MAX_BYTES = 4_000_000  # and its 4 MB


class Rerun(optimistic.Rerun):
    """The commit was cancelled: run the body again from fresh reads (after the engine's
    backoff), reading ``suspects`` (records it had written blind and whose condition failed)
    before writing them."""

    def __init__(self, suspects: frozenset[Key] = frozenset()) -> None:
        super().__init__()
        self.suspects = suspects


@dataclasses.dataclass(slots=True)
class _Entry:
    request: dict[str, Any]
    rerun: bool  # its condition failing means "changed since it was read"
    what: str
    key: Key | None = None  # the record written (None: a version check)


def commit(api: Api, blobs: Blobs, caches: Caches, reads: Reads, writes: dict[Key, Write]) -> None:
    """Commit ``writes`` with one ``TransactWriteItems`` whose conditions are what ``reads``
    relied on; then move the caches on. Raises :class:`Rerun` or ConflictError."""
    table = api.settings.table
    offloaded = False
    for key, write in writes.items():
        if write.item is not None and write.item.body is not None:
            # Before the commit; under its partition's folder (an erase removes the folder).
            write.item.ref = blobs.offload(write.item.body, write.what, key[0])
            offloaded = offloaded or write.item.ref is not None
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
    if offloaded:
        crash_point("store.after-offload")
    if len(entries) > MAX_ITEMS:
        staged = stage(api, writes, reads)  # a long session's fork: see _ddb_stage
        entries = [e for e in entries if e.key is None or e.key not in staged]
    if len(entries) > MAX_ITEMS:
        raise StoreError(
            f"a transaction of {len(entries)} items is more than DynamoDB commits at once "
            f"({MAX_ITEMS}), and they are not records of a new session that could be staged "
            "first: write fewer records per transition"
        )
    committed = {e.key for e in entries}
    size = sum(
        len(w.item.body.encode())
        for k, w in writes.items()
        if k in committed and w.item is not None and w.item.body is not None and w.item.ref is None
    )
    if size > MAX_BYTES:
        raise StoreError(
            f"a transaction of {size} bytes is more than DynamoDB commits at once (4 MB): give "
            "the store an S3 bucket (?bucket=NAME) or a lower ?offload_threshold="
        )
    token = secrets.token_hex(16)
    for entry in entries:
        _stamp(entry, token)
    touched = set(reads.used) | written
    try:
        api.transact([e.request for e in entries], token)
    except Cancelled as cancelled:
        # Whatever happened, nothing read for this commit is reused, and nothing is built on
        # what it wrote: the next read or run of what it touched reads afresh.
        caches.drop(touched)
        if _landed(api, written, token):
            _hold(caches, writes)
            return  # a resend of a commit that had landed (see the module's docstring)
        _cancelled(cancelled, entries, caches)
    except StoreUnavailableError:
        caches.drop(touched)
        try:
            landed = _landed(api, written, token)
        except StoreUnavailableError:
            landed = False
        if not landed:
            raise  # its outcome is unknown: said in the error
        _hold(caches, writes)
        return
    _hold(caches, writes)
    done: dict[Key, Item | None] = {k: w.item for k, w in writes.items()}
    done.update(heads)
    caches.advance_by(reads.used, done)
    for key, write in writes.items():
        if not versioned(key[0]) and write.item is not None and write.item.target is not None:
            caches.learn(write.item)


def _hold(caches: Caches, writes: dict[Key, Write]) -> None:
    """After a commit known to have landed: the leases of the sessions it wrote, as this
    store holds them (:meth:`Caches.hold`)."""
    for write in writes.values():
        record = write.item.record if write.item is not None else None
        if isinstance(record, SessionRecord):
            caches.hold(record, write.replaces)


def _landed(api: Api, written: set[str], token: str) -> bool:
    """Whether the commit of ``token`` is in the table: a head it wrote holds its token (a
    commit is all or nothing, so one head says it for all). False when it wrote no head."""
    if not written:
        return False
    heads = api.batch_get([(pk, HEAD) for pk in sorted(written)])
    return any(item.tok == token for item in heads.values())


def _stamp(entry: _Entry, token: str) -> None:
    """Set ``tok`` on a head update: the proof, read back, that this commit landed."""
    update = entry.request.get("Update")
    if update is None:
        return
    update["ExpressionAttributeValues"][":tok"] = {"S": token}
    expression = str(update["UpdateExpression"])
    if expression.startswith("SET "):
        update["UpdateExpression"] = "SET tok = :tok, " + expression[len("SET ") :]
    else:
        update["UpdateExpression"] = "SET tok = :tok " + expression


def _cancelled(cancelled: Cancelled, entries: list[_Entry], caches: Caches) -> None:
    """Raise Rerun (the caches are already dropped), marking the records written blind whose
    condition failed as suspects the rerun reads first."""
    failed = [
        entry
        for entry, code in zip(entries, cancelled.codes, strict=False)
        if code == "ConditionalCheckFailed"
    ]
    busy = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
    if failed or busy & set(cancelled.codes):
        suspects = frozenset(e.key for e in failed if not e.rerun and e.key is not None)
        caches.forget(suspects)
        if not failed:
            time.sleep(0.01)
        raise Rerun(suspects)
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
    elif write is not None and write.erase:
        # Erasure: the session's record leaves its head; the partition version moves on.
        names["#v"] = "v"
        update = "REMOVE b, o, #v ADD sv :one"
        what = write.what
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
    key = (pk, HEAD) if write is not None and write.item is not None else None
    return _Entry({"Update": request}, relied, what, key)


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
    return _Entry({operation: request}, write.reread, write.what, key)


def _key(key: Key) -> dict[str, Any]:
    return {"pk": {"S": key[0]}, "sk": {"S": key[1]}}
