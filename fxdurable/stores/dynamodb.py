"""The DynamoDB store: ``dynamodb://TABLE?region=...&endpoint_url=...&bucket=...``.

One table (``pk`` and ``sk``, both strings, on-demand capacity), every read strongly
consistent, every transaction one ``TransactWriteItems``. Needs ``pip install
'fxdurable[aws]'``; :mod:`fxdurable.backends` imports this module (and boto3) only for a
``dynamodb://`` URL. Credentials come from boto3's usual chain, never from the URL.

**Layout.** Everything the journal reads is reachable by primary key (a global secondary index
cannot be read strongly consistent), so a session's records share its partition and a range
of them is one ``Query``::

    pk                    sk                            item
    S#<sid>               #                             the session's head: its version sv
                                                        and SessionRecord (b, v); lease inside
    S#<sid>               SUB#<seq:012d>                SubmissionRecord, by admission order
    S#<sid>               UNS#<seq:012d>                a copy of each queued/running one
    S#<sid>               TURN#<turn id>                TurnRecord
    S#<sid>               TASK#<len>:<turn>#<round:012d>#<index:012d>   ToolTaskRecord
    S#<sid>               MSG#<seq:012d>                MessageRecord (append-only)
    S#<sid>               EV#<seq:012d>                 EventRecord (append-only, gap-free)
    T#<turn id>           #  /  MC#<round:012d>          head / ModelCallRecord (insert-only)
    A#<submission id>     #  /  AT#<number:012d>         head / AttemptRecord
    I#sub#<id>            #                             pointer: the submission's (pk, sk)
    I#turn#<id>           #                             pointer: the turn's (pk, sk)
    I#task#<id>           #                             pointer: the tool task's (pk, sk)
    R#<request id>        #                             the submission of a request id
    SESSIONS              <sid>                         every session: list_sessions
    ACTIVE                <sid>                         sessions whose status is active
    RETAIN                <retain_until:020.3f>#<sid>   idle sessions with a retention, by
                                                        when they fall due (core/retention.py)
    #SCHEMA               #                             the data marker: v, the oldest layout
                                                        version of fxdurable that may open the
                                                        store; layout, the layout version when
                                                        it is not v's; claim / claim_until, the
                                                        migrator running a layout step
    B#<sha256 hex>        #  /  C#<i:06d>                a blob's head / its chunks

Record attributes: ``b`` the record's JSON (:mod:`fxdurable.core.recordcodec`) or ``o`` the
sha256 of it in S3, ``v`` its version; a head's ``sv``; a pointer's ``tpk``/``tsk``. Ids are
random (``sub-…``), so a submission, turn or tool task looked up by its id alone goes through
its pointer, written with it in the same transaction and never changed (so this store keeps
it for good). Model calls and attempts have partitions of their own because their records
name only a turn or a submission. A request id's item is written on condition
``attribute_not_exists``: one submission per request id.

**Transactions** are optimistic. Each versioned partition (``S#``, ``T#``, ``A#``) has a
head whose ``sv`` every commit writing the partition moves, on condition that it is still
the version the body read (:mod:`._ddb_commit`): if another writer got there first, or a
fence went stale, nothing is written and the body runs again from fresh reads (bodies are
pure over their reads; at most 50 runs, then :class:`~fxdurable.errors.StoreError`). A write
the body made blind carries its record condition; when it fails, nothing is written and the
body runs again, reading that record first: one really there raises
:class:`~fxdurable.errors.ConflictError` from the body. Any cancelled commit drops the
caches of what it read and wrote (a warm process never recomputes the same write from what
it held), and a commit whose answer was lost is decided by the token it left on its heads
(:mod:`._ddb_commit`). The event sequence stays
gap-free under concurrent writers: an event is a conditional put of the session's next seq,
in the transaction that moves the session record's ``next_event_seq``.

**Requests** (counted by tests/stores/test_dynamodb_steps.py through the runtime;
``bench.dynamodb_steps`` reports them). The store keeps what it read of a partition at its
version (:mod:`._ddb_cache`). With the session held (its previous transition through this
store leaves it so: a commit conditioned on ``sv = v`` moves the cache to *v + 1* with its
own writes, a blind write from the records the journal holds included, since the condition
rides on the cached version), a transition is 1 request, its ``TransactWriteItems``, and a
read is 1, a ``GetItem`` of the session's head, or 0 when it is the lease holder's first
read after its own commit: a read of the session's partition only, all of it from what that
commit left, less than a poll period (150 ms) after it, while this store holds the session's
live lease (it took it, and the wall clock says it has not expired). That read is the
commit's state (the interrupt watcher's reads, a poll period into a call, always check); a
write the commit did not see (a steer, an abort from another process) moved the partition's
version, so it is in the next read, which checks the head, and the holder's next commit is
cancelled on it and reruns on fresh reads. A commit whose answer was lost (decided by its
token) or that was cancelled leaves nothing to read from: its caches are dropped. A **tool
step** through the runtime (the result's commit, and the model response's with the next
call's intent, the model request's read being the first after the result's commit) costs
**2**, however long the session; it was 3 with that read checking the head, and 4 before the
merged commits. A cold read costs one more ``Query`` or ``GetItem`` per range or record it
misses, plus one ``BatchGetItem`` of the heads it relied on (so what it returns is one
snapshot). Reads never ``Scan``; only ``blob_digests`` (the blob audit, ``fxdurable check
--blobs``) does, since every blob is a partition of its own (:mod:`._ddb_blob_items`).

**Large records** go to S3 (``?bucket=NAME``; ``s3_prefix=``, default ``fxd-blobs``;
``offload_threshold=`` bytes, default 65536): a record whose JSON is past the threshold is put
at ``<s3_prefix>/sha256/<hex>`` *before* the transaction that references it, so a committed
item never points at a missing object. If that transaction never commits (a crash, a
conflict), the object is an orphan nothing references: harmless (never read; a retry re-uses
it), costing only storage, and removed by the bucket's lifecycle rule on the prefix, which
must not expire objects younger than the sessions kept (committed items reference objects
under the same prefix; docs/dynamodb.md). Without a bucket, a record that
would not fit an item (400 KB) raises :class:`~fxdurable.errors.StoreError` naming
``?bucket=`` before anything is written.

**Blobs** (``put_blob``/``get_blob``, :mod:`._ddb_blob_items`): a blob up to the offload
threshold (with a bucket) or 350 KB (without) is its head item; a larger one is the S3 object
of its digest when the store has a bucket, and chunk items of 350 KB under its head when it
has none (so up to ``MAX_BLOB_BYTES``, 32 MiB, either way). The head is written last: a blob
whose head exists is whole. A read is one ``Query`` of the partition (plus a ``GetObject``),
verified against the digest. Blob partitions came after layout version 1 without changing it.

**Layout versions.** Layout changes are numbered steps, which a writer's open applies when
they are compatible and :func:`migrate` (``fxdurable migrate URL``) when not; a reader's open
never applies any (:mod:`._ddb_layout`: the marker's encoding; :mod:`._layout`: the
mechanism).

**Errors and retries.** Throttling and 5xx are retried (botocore's standard mode, then capped
exponential backoff with jitter for about 10 s), then
:class:`~fxdurable.errors.StoreUnavailableError`; a commit that cannot be confirmed raises it
too (its outcome unknown; it carries a ``ClientRequestToken``, so a resend never applies it
twice). Nothing raised is a botocore exception.

**Limits.** A transaction holds at most 100 items and 4 MB. ``SESSIONS`` and ``ACTIVE`` are
single partitions (about 1,000 writes a second each): a session's creation writes
``SESSIONS`` once, and a status change between active and idle writes ``ACTIVE``; a
deployment admitting hundreds of new sessions a second needs them sharded. ``list_sessions``
and ``active_sessions`` are a ``Query`` of them and a ``BatchGetItem`` of the heads, not a
snapshot validated at commit (they serve scans and checks, whose wakes are hints).

``create=True`` opens create a missing table (on-demand, for tests and local use) and wait
for it; production tables come from the SAM template. ``create=False`` (read-only tools)
refuses a table without the ``#SCHEMA`` marker and writes nothing, layout steps included.
See docs/dynamodb.md (IAM actions, costs).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from fxdurable.core.optimistic import Rerun, contention_backoff, optimistic
from fxdurable.core.store import ReadView, Tx
from fxdurable.errors import ConfigurationError, ConflictError, StoreError

try:
    import boto3  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ConfigurationError(
        "the DynamoDB store needs boto3: pip install 'fxdurable[aws]'"
    ) from exc

from fxdurable.stores._body import refuse_awaitable
from fxdurable.stores._ddb_api import Api, TableMissing
from fxdurable.stores._ddb_blob_items import BlobItems
from fxdurable.stores._ddb_blobs import Blobs
from fxdurable.stores._ddb_cache import Caches
from fxdurable.stores._ddb_commit import Rerun as CommitRerun
from fxdurable.stores._ddb_commit import commit
from fxdurable.stores._ddb_items import HEAD, Key, versioned
from fxdurable.stores._ddb_layout import (
    MIGRATIONS,
    DynamoStep,
    apply_compatible,
    check_opened,
    fetch_marker,
    migrate,
    new_marker,
)
from fxdurable.stores._ddb_reads import Reads
from fxdurable.stores._ddb_settings import parse_url
from fxdurable.stores._ddb_tx import DynamoTx

__all__ = ["DynamoStore", "migrate"]

T = TypeVar("T")

_MAX_RUNS = 50  # runs of one body before giving up on concurrent writers
_BACKOFF = contention_backoff(random.random)


class DynamoStore:
    """``dynamodb://TABLE[?region=&endpoint_url=&bucket=&s3_prefix=&offload_threshold=]``.

    ``session`` is a ``boto3.Session`` to take credentials and the default region from (an
    assumed role, a profile, tests' dummies); by default boto3's own. ``migrations``: the
    layout steps this code knows (tests inject their own).
    """

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        session: Any = None,
        migrations: Sequence[DynamoStep] = MIGRATIONS,
    ) -> None:
        self._settings = parse_url(url)
        self.url = url
        self._api = Api(self._settings, session)
        self._blobs = Blobs(self._api)
        self._blob_items = BlobItems(self._api, self._blobs)
        self._caches = Caches()
        self._closed = False
        self._lock = threading.Lock()
        try:
            self._open(create, migrations)
        except BaseException:  # a refused open leaves no client's connections behind
            self._api.close()
            raise

    @property
    def where(self) -> str:
        return self._settings.where

    @property
    def requests(self) -> int:
        """DynamoDB and S3 requests this store has sent (what a step costs)."""
        return self._api.requests

    def _open(self, create: bool, steps: Sequence[DynamoStep]) -> None:
        """One ``GetItem`` of the marker when the table is there and nothing is pending (a
        Lambda cold start); ``create``: make a missing table and write the marker first, and
        apply pending compatible steps (:mod:`._ddb_layout`)."""
        api = self._api
        try:
            raw = fetch_marker(api)
        except TableMissing:
            if not create:
                raise
            self._create_table()
            raw = None
        if raw is None and create:
            new_marker(api, steps)  # unless another process wrote one first: read theirs
            raw = fetch_marker(api)
        pending = check_opened(raw, steps, create=create, where=self.where, url=self.url)
        if pending:  # a writer's open, and only compatible steps: apply them before any use
            apply_compatible(api, steps, url=self.url)

    def _create_table(self) -> None:
        api, table = self._api, self._settings.table
        try:
            api.call(
                api.dynamodb,
                "create_table",
                TableName=table,
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "sk", "AttributeType": "S"},
                ],
                KeySchema=[
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
        except StoreError as exc:
            if "ResourceInUse" not in str(exc):  # another process is creating it
                raise
        deadline = time.monotonic() + 120
        while True:
            reply = api.call(api.dynamodb, "describe_table", TableName=table)
            if reply["Table"]["TableStatus"] == "ACTIVE":
                return
            if time.monotonic() > deadline:
                raise StoreError(f"DynamoDB {self.where} did not become ACTIVE in 120 s")
            time.sleep(0.5)

    # -- the Store protocol -------------------------------------------------------------------

    def _run(self, body: Callable[[DynamoTx], T], *, writable: bool) -> T:
        """Run ``body`` until a run commits on current reads (the runs, their backoff and
        the error when they run out: :func:`optimistic`)."""
        self._check_open()
        suspects: frozenset[Key] = frozenset()

        def run(_: int) -> T:
            nonlocal suspects
            reads = Reads(
                self._api, self._blobs, self._caches, writable=writable, suspects=suspects
            )
            tx = DynamoTx(reads, writable=writable)
            try:
                result = body(tx)
                if writable:
                    refuse_awaitable(result)
            except Exception as exc:
                if reads.still_current():
                    if isinstance(exc, ConflictError):
                        # A refusal drawn from what this run read (a suspect read back, say):
                        # the next transaction reads afresh, so a record that has gone since
                        # is not refused again from the cache (issue 22 §2).
                        self._caches.drop(list(reads.used))
                        self._caches.forget(suspects)
                    raise
                # The body saw a stale or torn view: its error may be spurious. Run it again
                # at once (nobody committed over it; its reads were only old).
                raise Rerun(delay=0) from exc
            try:
                if tx.writes:
                    commit(self._api, self._blobs, self._caches, reads, tx.writes)
                    if tx.deleted:
                        self._erased(tx)
                elif not reads.still_current():
                    raise Rerun(delay=0)
            except CommitRerun as rerun:
                suspects = suspects | rerun.suspects
                raise
            return result

        return optimistic(
            run,
            attempts=_MAX_RUNS,
            backoff=_BACKOFF,
            what=f"a transaction on DynamoDB {self.where}",
        )

    def transact(self, body: Callable[[Tx], T]) -> T:
        return self._run(body, writable=True)

    def read(self, body: Callable[[ReadView], T]) -> T:
        return self._run(body, writable=False)

    def put_blob(self, data: bytes) -> str:
        self._check_open()
        return self._blob_items.put(data)

    def get_blob(self, digest: str) -> bytes | None:
        self._check_open()
        return self._blob_items.get(digest)

    def delete_blob(self, digest: str) -> None:
        self._check_open()
        self._blob_items.delete(digest)

    def blob_digests(self) -> Iterator[str]:
        self._check_open()
        return self._blob_items.digests()

    def _erased(self, tx: DynamoTx) -> None:
        """After a commit that deleted records: what was cached of them goes, and the S3
        objects of their offloaded bodies are removed (a crash before that leaves an object
        no record names; the S3 lifecycle rule expires it, docs/erasure.md)."""
        partitions = sorted({key[0] for key in tx.deleted})
        self._caches.drop(partitions)
        self._caches.forget(frozenset(tx.deleted))
        for ref in dict.fromkeys(tx.dropped_refs):
            self._blobs.delete_object(ref)
        for pk in partitions:
            # Every version of its records' bodies, once the partition holds none of them:
            # a session's with its record (deleted last), a turn's or an attempt's when empty.
            if not versioned(pk):
                continue
            if pk.startswith("S#"):
                if (pk, HEAD) in tx.deleted:
                    self._blobs.purge(pk)
            elif all(item["sk"]["S"] == HEAD for item in self._api.query_raw(pk)):
                self._blobs.purge(pk)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the DynamoDB store on {self.where} is closed")

    def close(self) -> None:
        """Refuse further calls and close the clients' connection pools."""
        self._closed = True
        self._api.close()
