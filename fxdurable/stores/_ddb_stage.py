"""Transactions past DynamoDB's 100 items: records staged first, made visible by the commit.

``TransactWriteItems`` holds at most 100 items; a fork of a long session writes thousands
(its copied messages, tool tasks and their pointers). Such a transaction is committed in two
parts. First its *stageable* writes are put with ``BatchWriteItem`` (25 a request, resent
while unprocessed): puts of records into a versioned partition whose head this transaction
read absent and creates (a new session's, a new turn's model calls), and pointers that never
change. Nothing reads them as records yet: a session exists once its head holds its record,
and every reader reaches a partition through the session (its indexes, its turns). Then
the rest — the heads, with ``attribute_not_exists(sv)``, the indexes, request ids, records
in existing partitions — commit as the one ``TransactWriteItems`` of :mod:`._ddb_commit`,
which makes the whole visible at once, or not at all.

A crash mid-way leaves staged items under a head that does not exist: invisible, and
harmless. The same transaction run again (a retried fork: the copy of a point is the same
whatever the time, :mod:`fxdurable.core.fork`) puts the same items again (a put of identical
content is idempotent) and commits; a different one that loses the race for the head reruns
and finds the session there. Before each batch the head is read again, so staging stops as
soon as another writer has made the partition visible (its records are never overwritten
once they are a session's); two *different* forks racing into one new id within that one
request's window is the limit of this scheme (docs/dynamodb.md).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from fxdurable.core.crash import crash_point
from fxdurable.errors import ConflictError
from fxdurable.stores._ddb_api import Api
from fxdurable.stores._ddb_items import HEAD, Key, to_wire, versioned
from fxdurable.stores._ddb_reads import Reads
from fxdurable.stores._ddb_tx import Write

__all__ = ["STAGE_BATCH", "stage"]

STAGE_BATCH = 400  # items put between two reads of the heads they are staged under
_PARALLEL = 8  # BatchWriteItem requests in flight at once (25 items each)


def stageable(key: Key, write: Write, reads: Reads, created: set[str]) -> bool:
    """Whether ``write`` may be put before the commit: a record put into a partition this
    transaction creates (``created``: heads read absent and written now; what is there already
    is a crashed run's leftover, never a session's), or a pointer (never changes, names its
    record's place)."""
    if write.item is None or write.expect is not None:
        return False  # a delete, or an update of a record that must be at a version
    pk, sk = key
    if versioned(pk):
        return sk != HEAD and pk in created
    return write.item.target is not None and pk.startswith("I#")


def stage(api: Api, writes: dict[Key, Write], reads: Reads) -> set[Key]:
    """Put the stageable writes of this transaction; the keys put. Raises ConflictError if a
    partition it stages under became visible meanwhile (another writer's)."""
    # Partitions whose head this run read absent (version 0) and that it writes: the commit
    # creates their heads on condition attribute_not_exists(sv).
    created = {pk for pk, _ in writes if versioned(pk) and reads.used.get(pk) == 0}
    staged = [k for k, w in writes.items() if stageable(k, w, reads, created)]
    for start in range(0, len(staged), STAGE_BATCH):
        heads = api.batch_get([(pk, HEAD) for pk in sorted(created)])
        taken = sorted(pk for (pk, _), head in heads.items() if head.sv is not None)
        if taken:
            raise ConflictError(
                f"partition {taken[0]!r} was created by another writer while this transaction "
                "staged its records"
            )
        chunk = staged[start : start + STAGE_BATCH]
        items = []
        for key in chunk:
            item = writes[key].item
            assert item is not None  # stageable() said so
            items.append(to_wire(item))
        # Several requests at once: a 10,000-event fork is thousands of items, and staged
        # items are independent puts (nothing reads them until the commit).
        parts = [items[i : i + 25] for i in range(0, len(items), 25)]
        with ThreadPoolExecutor(max_workers=min(_PARALLEL, len(parts))) as pool:
            list(pool.map(api.batch_write, parts))
        crash_point("store.mid-stage")
    return set(staged)
