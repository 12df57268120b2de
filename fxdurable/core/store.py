"""The store contract: five record primitives and seven store methods; the rest derived once.

A backend supplies **12 methods** (issue 23 §1 reduced 29 to 9; issue 28 §3's erasure added
the two deletes, and its blob audit the enumeration of blobs):

- on its transaction (:class:`Primitives`; a read view has the first two): ``get(kind, key)``,
  ``range(kind, index, value, *, after=, limit=)``, ``put(record, *, expected_version)``,
  ``append(record)`` and ``delete(kind, key)``;
- on the store (:class:`Store`): ``transact``, ``read``, ``put_blob``, ``get_blob``,
  ``delete_blob``, ``blob_digests``, ``close``.

The kinds (a key, a version or append-only, named indexes) are declared once in
:mod:`fxdurable.core.kinds`. The 24 named reads and writes the journal and the runtime call
(``get_session``, ``unsettled_submissions``, ``put_tool_task``, ...) are :class:`DerivedTx`'s,
which a backend's transaction inherits: each is exactly one primitive call, so a named read
costs what the backend's mapping of that one (kind, index) costs, never a scan or a second
round trip on top. That is how the previous contract's reasons for 16 named reads (each
weighed by issue 23: the reconciliation sweep's ``active`` index, the request-id index, a
turn's one round of tool tasks, one model call by (turn, round), a session's tool tasks in one
query, messages and events past a cursor) survive the reduction: they are the kinds' indexes
now, and each backend answers each index with the query it answered before (the counting
tests, ``tests/bench/test_step_reads.py`` and the Redis and DynamoDB request counts in
``tests/stores``, are unchanged).

All writes happen inside ``store.transact(body)``: the body reads and writes through the
:class:`Tx` it is given, and the whole body commits or none of it does. ``put`` is
*conditional*: it takes the version the caller read (``None`` means "must not exist yet"),
and a mismatch raises :class:`~fxdurable.errors.ConflictError`; ``append`` inserts a record
of an append-only kind and raises the same error if its key exists. Reads see the body's own
writes. Fencing tokens are checked by the journal inside the same transaction, so a SQL store
(one serialised transaction), Redis (WATCH/MULTI or a Lua script) and DynamoDB
(TransactWriteItems with condition expressions) can all implement it.

What is shared between the optimistic stores is the machinery under the primitives: the retry
loop (:mod:`fxdurable.core.optimistic`) and the read cache (``fxdurable/stores/_cache.py``).
A new store passes :class:`fxdurable.testing.store_contract.StoreContract`, whose
``PrimitiveContract`` part calls the four primitives directly.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from fxdurable.core.kinds import (
    ATTEMPT,
    EVENT,
    MESSAGE,
    MODEL_CALL,
    SESSION,
    SUBMISSION,
    TOOL_TASK,
    TURN,
    Key,
    Kind,
    kind_of,
)
from fxdurable.core.records import (
    AttemptRecord,
    EventRecord,
    MessageRecord,
    ModelCallRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
    TurnRecord,
)

__all__ = ["DerivedReads", "DerivedTx", "Primitives", "ReadPrimitives", "ReadView", "Store", "Tx"]

T = TypeVar("T")
R = TypeVar("R")


class ReadPrimitives(Protocol):
    """The two reads a store supplies (see :mod:`fxdurable.core.kinds` for kinds and indexes)."""

    def get(self, kind: Kind[R], key: Key) -> R | None:
        """The record of ``kind`` whose key fields are ``key``, or None."""
        ...

    def range(
        self,
        kind: Kind[R],
        index: str,
        value: Key = (),
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> Sequence[R]:
        """The records of ``kind`` that ``index`` selects for ``value`` (its ``match`` fields),
        in the index's order; with ``after``, only those whose last order field is past it;
        at most ``limit`` (None: all; callers never pass 0 or less)."""
        ...


class Primitives(ReadPrimitives, Protocol):
    """The two writes a store supplies, inside a transaction."""

    def put(self, record: object, *, expected_version: int | None) -> None:
        """Insert (``expected_version=None``: must not exist) or replace (must be at that
        version) a record of a versioned kind; ConflictError otherwise, nothing written."""
        ...

    def append(self, record: object) -> None:
        """Insert a record of an append-only kind (model calls, messages, events);
        ConflictError if its key exists."""
        ...

    def delete(self, kind: Kind[R], key: Key) -> None:
        """Remove the record of ``kind`` whose key fields are ``key``, and every index entry
        the store keeps for it. Unconditional and idempotent: no version is checked, and a
        missing record is no error (an erase resumed after a crash deletes again what is
        gone). Only erasure (:mod:`fxdurable.core.journal.erase`) calls it; a body that
        deletes a record does not read it again."""
        ...


class ReadView(ReadPrimitives, Protocol):
    """Everything the runtime may read. It cannot write. (Derived: :class:`DerivedReads`.)"""

    def get_session(self, session_id: str) -> SessionRecord | None: ...
    def list_sessions(self) -> Sequence[SessionRecord]: ...
    def active_sessions(self) -> Sequence[SessionRecord]:
        """Sessions whose status is active (they have unsettled submissions):
        what a reconciliation sweep looks at."""
        ...

    def get_submission(self, submission_id: str) -> SubmissionRecord | None: ...
    def get_submission_by_request(self, request_id: str) -> SubmissionRecord | None: ...
    def submissions(self, session_id: str) -> Sequence[SubmissionRecord]:
        """Every submission of the session, in admission order."""
        ...

    def unsettled_submissions(self, session_id: str) -> Sequence[SubmissionRecord]:
        """Queued or running submissions, in admission order."""
        ...

    def attempts(self, submission_id: str) -> Sequence[AttemptRecord]: ...
    def get_turn(self, turn_id: str) -> TurnRecord | None: ...
    def get_model_call(self, turn_id: str, round_: int) -> ModelCallRecord | None: ...
    def model_calls(self, turn_id: str) -> Sequence[ModelCallRecord]: ...
    def get_tool_task(self, task_id: str) -> ToolTaskRecord | None: ...
    def tool_tasks(self, turn_id: str, round_: int | None = None) -> Sequence[ToolTaskRecord]:
        """The turn's tool tasks ordered by (round, index); only one round's if given."""
        ...

    def session_tool_tasks(self, session_id: str) -> Sequence[ToolTaskRecord]: ...
    def messages(self, session_id: str, after: int = 0) -> Sequence[MessageRecord]:
        """Messages with ``seq > after`` in sequence order: a reader holding the conversation up
        to ``after`` reads only what is newer (an indexed range, not the session)."""
        ...

    def events(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> Sequence[EventRecord]:
        """Events with ``seq > after`` in sequence order: ``after`` is the reader's cursor."""
        ...


class Tx(ReadView, Primitives, Protocol):
    """A transaction: reads see its own writes; conditional writes raise ConflictError."""

    def put_session(self, record: SessionRecord, *, expected_version: int | None) -> None: ...
    def put_submission(self, record: SubmissionRecord, *, expected_version: int | None) -> None: ...
    def put_attempt(self, record: AttemptRecord, *, expected_version: int | None) -> None: ...
    def put_turn(self, record: TurnRecord, *, expected_version: int | None) -> None: ...
    def put_tool_task(self, record: ToolTaskRecord, *, expected_version: int | None) -> None: ...
    def insert_model_call(self, record: ModelCallRecord) -> None: ...
    def append_message(self, record: MessageRecord) -> None: ...
    def append_event(self, record: EventRecord) -> None: ...


class DerivedReads(abc.ABC):
    """:class:`ReadView` from the two read primitives: a backend's read view inherits it and
    supplies ``get`` and ``range``. Each named read is one primitive call."""

    __slots__ = ()

    @abc.abstractmethod
    def get(self, kind: Kind[R], key: Key) -> R | None: ...

    @abc.abstractmethod
    def range(
        self,
        kind: Kind[R],
        index: str,
        value: Key = (),
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> Sequence[R]: ...

    def get_session(self, session_id: str) -> SessionRecord | None:
        return self.get(SESSION, (session_id,))

    def list_sessions(self) -> Sequence[SessionRecord]:
        return self.range(SESSION, "all")

    def active_sessions(self) -> Sequence[SessionRecord]:
        return self.range(SESSION, "active")

    def get_submission(self, submission_id: str) -> SubmissionRecord | None:
        return self.get(SUBMISSION, (submission_id,))

    def get_submission_by_request(self, request_id: str) -> SubmissionRecord | None:
        found = self.range(SUBMISSION, "request", (request_id,))
        return found[0] if found else None

    def submissions(self, session_id: str) -> Sequence[SubmissionRecord]:
        return self.range(SUBMISSION, "session", (session_id,))

    def unsettled_submissions(self, session_id: str) -> Sequence[SubmissionRecord]:
        return self.range(SUBMISSION, "unsettled", (session_id,))

    def attempts(self, submission_id: str) -> Sequence[AttemptRecord]:
        return self.range(ATTEMPT, "submission", (submission_id,))

    def get_turn(self, turn_id: str) -> TurnRecord | None:
        return self.get(TURN, (turn_id,))

    def get_model_call(self, turn_id: str, round_: int) -> ModelCallRecord | None:
        return self.get(MODEL_CALL, (turn_id, round_))

    def model_calls(self, turn_id: str) -> Sequence[ModelCallRecord]:
        return self.range(MODEL_CALL, "turn", (turn_id,))

    def get_tool_task(self, task_id: str) -> ToolTaskRecord | None:
        return self.get(TOOL_TASK, (task_id,))

    def tool_tasks(self, turn_id: str, round_: int | None = None) -> Sequence[ToolTaskRecord]:
        if round_ is None:
            return self.range(TOOL_TASK, "turn", (turn_id,))
        return self.range(TOOL_TASK, "turn_round", (turn_id, round_))

    def session_tool_tasks(self, session_id: str) -> Sequence[ToolTaskRecord]:
        return self.range(TOOL_TASK, "session", (session_id,))

    def messages(self, session_id: str, after: int = 0) -> Sequence[MessageRecord]:
        return self.range(MESSAGE, "session", (session_id,), after=after)

    def events(
        self, session_id: str, after: int = 0, limit: int | None = None
    ) -> Sequence[EventRecord]:
        if limit is not None and limit < 0:
            limit = None  # as SQL's LIMIT -1: no limit
        if limit == 0:
            return []
        return self.range(EVENT, "session", (session_id,), after=after, limit=limit)


class DerivedTx(DerivedReads):
    """:class:`Tx` from the four primitives: a backend's transaction inherits it and supplies
    ``get``, ``range``, ``put`` and ``append``. Each named write is one primitive call."""

    __slots__ = ()

    @abc.abstractmethod
    def put(self, record: object, *, expected_version: int | None) -> None: ...

    @abc.abstractmethod
    def append(self, record: object) -> None: ...

    @abc.abstractmethod
    def delete(self, kind: Kind[R], key: Key) -> None: ...

    def _checked_put(self, kind: Kind[R], record: R, expected_version: int | None) -> None:
        if kind_of(record) is not kind:
            raise TypeError(f"not a {kind.name} record: {type(record).__name__}")
        self.put(record, expected_version=expected_version)

    def _checked_append(self, kind: Kind[R], record: R) -> None:
        if kind_of(record) is not kind:
            raise TypeError(f"not a {kind.name} record: {type(record).__name__}")
        self.append(record)

    def put_session(self, record: SessionRecord, *, expected_version: int | None) -> None:
        self._checked_put(SESSION, record, expected_version)

    def put_submission(self, record: SubmissionRecord, *, expected_version: int | None) -> None:
        self._checked_put(SUBMISSION, record, expected_version)

    def put_attempt(self, record: AttemptRecord, *, expected_version: int | None) -> None:
        self._checked_put(ATTEMPT, record, expected_version)

    def put_turn(self, record: TurnRecord, *, expected_version: int | None) -> None:
        self._checked_put(TURN, record, expected_version)

    def put_tool_task(self, record: ToolTaskRecord, *, expected_version: int | None) -> None:
        self._checked_put(TOOL_TASK, record, expected_version)

    def insert_model_call(self, record: ModelCallRecord) -> None:
        self._checked_append(MODEL_CALL, record)

    def append_message(self, record: MessageRecord) -> None:
        self._checked_append(MESSAGE, record)

    def append_event(self, record: EventRecord) -> None:
        self._checked_append(EVENT, record)


class Store(Protocol):
    """A durable backend, chosen by URL (see :func:`fxdurable.backends.open_store`)."""

    url: str

    def transact(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` in one atomic transaction and return its result.

        A body that returns an awaitable is refused (``TypeError``) and rolled back: the
        durable core is synchronous, and an await inside a transaction would hold it open
        across arbitrary I/O.
        """
        ...

    def read(self, body: Callable[[ReadView], T]) -> T:
        """Run ``body`` against a consistent read-only snapshot."""
        ...

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` and return its digest (lowercase hex sha256). Idempotent (the same
        bytes are the same blob) and immutable; durable when it returns. Outside any
        transaction: never call it from a ``transact`` body. Safe from any thread. Raises
        :class:`~fxdurable.errors.BlobTooLargeError` past ``MAX_BLOB_BYTES``, writing
        nothing."""
        ...

    def get_blob(self, digest: str) -> bytes | None:
        """The bytes stored under ``digest``, or None when there are none (or ``digest`` is
        not a digest). Verified: bytes that do not hash to ``digest`` raise
        :class:`~fxdurable.errors.BlobCorruptError`, never come back."""
        ...

    def delete_blob(self, digest: str) -> None:
        """Remove the blob stored under ``digest`` (its bytes everywhere the store kept them:
        an S3 object too). Idempotent; a string that is not a digest names none. Outside any
        transaction, like ``put_blob``: erasure deletes a blob only once no committed record
        names it."""
        ...

    def blob_digests(self) -> Iterator[str]:
        """The digest of every blob the store holds (each one ``get_blob`` has bytes for), in
        no given order, fetched page by page as the iterator is consumed (a page at a time in
        memory, each page its own short read, outside any transaction like the other blob
        methods). Every blob stored for the whole iteration comes out; one put or deleted
        meanwhile may or may not, and a digest may come out twice (Redis's ``SCAN``): a
        caller that counts dedupes. Read-only; one pass reads every blob's key once (on
        DynamoDB, where each blob is a partition of its own, a ``Scan`` of the table). Only
        the blob audit (``fxdurable check --blobs``) calls it."""
        ...

    def close(self) -> None: ...
