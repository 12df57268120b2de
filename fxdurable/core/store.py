"""The store contract: a handful of record operations, atomic inside one transaction.

A backend implements :class:`Store`. All writes happen inside ``store.transact(body)``: the body
reads and writes through the :class:`Tx` it is given, and the whole body commits or none of it
does. Writes are *conditional*: ``put_*`` takes the version the caller read (``None`` means "must
not exist yet"), and a mismatch raises :class:`~fxdurable.errors.ConflictError`. Fencing tokens
are checked by the journal inside the same transaction, so a SQL store (one serialised
transaction), Redis (WATCH/MULTI or a Lua script) and DynamoDB (TransactWriteItems with
condition expressions) can all implement it.

Every method is a primitive a store supplies: 29 in all (16 reads of :class:`ReadView`, 8
writes of :class:`Tx`, 5 of :class:`Store`). The ones a reader could derive from others are
kept because the derivation would cost a backend a full scan or more round trips on a path
that runs all the time (issue 23 §1 weighed each):

- ``active_sessions``: every worker's reconciliation sweep (at start and periodically) reads
  it; derived from ``list_sessions`` it would read every session ever made, each sweep.
- ``unsettled_submissions``: admission, claim and settle read it; derived from
  ``submissions`` it would read a session's whole history of prompts each time.
- ``get_submission_by_request``: an idempotent submit asks it before admitting; without the
  store's request index it is a scan of every submission.
- ``tool_tasks(turn_id, round_)``: the conversation re-reads the rounds that changed at
  every model step; a round's range is what a long turn must not re-read whole.
- ``get_model_call``: every attempt that starts or resumes a turn reads its last round's
  call; a turn's calls carry whole responses, so reading them all to take one grows with it.
- ``session_tool_tasks``: the model step builds history from it; derived per turn it would
  be one read per submission.

What is shared between stores is not a read but the machinery under them: the retry loop of
the optimistic stores (:mod:`fxdurable.core.optimistic`) and their read cache
(``fxdurable/stores/_cache.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

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

__all__ = ["ReadView", "Store", "Tx"]

T = TypeVar("T")


class ReadView(Protocol):
    """Everything the runtime may read. It cannot write."""

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


class Tx(ReadView, Protocol):
    """A transaction: reads see its own writes; conditional writes raise ConflictError."""

    def put_session(self, record: SessionRecord, *, expected_version: int | None) -> None: ...
    def put_submission(self, record: SubmissionRecord, *, expected_version: int | None) -> None: ...
    def put_attempt(self, record: AttemptRecord, *, expected_version: int | None) -> None: ...
    def put_turn(self, record: TurnRecord, *, expected_version: int | None) -> None: ...
    def put_tool_task(self, record: ToolTaskRecord, *, expected_version: int | None) -> None: ...
    def insert_model_call(self, record: ModelCallRecord) -> None: ...
    def append_message(self, record: MessageRecord) -> None: ...
    def append_event(self, record: EventRecord) -> None: ...


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

    def close(self) -> None: ...
