"""The record kinds, declared once: each kind's key, its version (or append-only), its indexes.

A store supplies four record primitives over these declarations (:mod:`fxdurable.core.store`):
``get(kind, key)``, ``range(kind, index, value, after=, limit=)``, ``put(record,
expected_version=)`` and ``append(record)``. Each backend maps a kind to what it has (a table
and its SQL indexes, Redis keys and sorted sets, DynamoDB items under a partition); the
named reads the journal and the runtime call are derived from the primitives once, in
:class:`fxdurable.core.store.DerivedTx`.

An :class:`Index` is a query the runtime needs, not a general one: the records whose
``match`` fields equal the value given, those of them whose ``where`` fields hold one of the
listed values (and whose ``present`` fields are not None), in ``order``; past ``after`` on
the last ``order`` field when the caller holds a cursor (messages, events), at most ``limit``
of them. ``order=()`` means insertion order (the
order the records were first written). A backend need not filter ``where`` exactly (Redis
keeps an index set beside the records): the contract suite checks what the derived reads
return, so a store is free in how, not in what.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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

__all__ = [
    "ATTEMPT",
    "EVENT",
    "KINDS",
    "MESSAGE",
    "MODEL_CALL",
    "SESSION",
    "SUBMISSION",
    "TOOL_TASK",
    "TURN",
    "Index",
    "Key",
    "Kind",
    "kind_of",
]

R = TypeVar("R")

Key = tuple[str | int, ...]  # a key's (or an index value's) fields, in declaration order


@dataclass(frozen=True, slots=True)
class Index:
    """One named query of a kind (see the module)."""

    match: tuple[str, ...] = ()
    where: Mapping[str, frozenset[str]] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    unique: bool = False  # at most one record per value (a request id)
    present: tuple[str, ...] = ()  # only records whose these fields are not None


@dataclass(frozen=True, slots=True, eq=False)
class Kind(Generic[R]):
    """A kind of record: ``cls``, keyed by ``key`` fields, written with a version check
    (``versioned``) or inserted once and never changed (model calls, messages, events: they
    are ``append``-ed). ``fixed`` names the fields besides the key an update never changes
    (a submission's session, seq and request id are set at admission); ``columns`` the
    fields a store may keep beside the record to answer its indexes."""

    name: str
    cls: type[R]
    key: tuple[str, ...]
    versioned: bool
    indexes: Mapping[str, Index]
    columns: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()

    def key_of(self, record: R) -> Key:
        return tuple(getattr(record, name) for name in self.key)

    def index(self, name: str) -> Index:
        try:
            return self.indexes[name]
        except KeyError:
            raise ValueError(f"{self.name} records have no index {name!r}") from None

    def __repr__(self) -> str:
        return f"Kind({self.name})"


_UNSETTLED = frozenset({"queued", "running"})

SESSION: Kind[SessionRecord] = Kind(
    "session",
    SessionRecord,
    key=("id",),
    versioned=True,
    columns=("status", "retain_until"),
    indexes={
        "all": Index(order=("id",)),
        # What a reconciliation sweep reads: never every session ever made.
        "active": Index(where={"status": frozenset({"active"})}, order=("id",)),
        # What the retention sweep reads (core/retention.py): idle sessions with a
        # retention, earliest due first; it stops at the first not due yet.
        "retention": Index(present=("retain_until",), order=("retain_until",)),
    },
)
SUBMISSION: Kind[SubmissionRecord] = Kind(
    "submission",
    SubmissionRecord,
    key=("id",),
    versioned=True,
    columns=("session_id", "seq", "request_id", "status"),
    fixed=("session_id", "seq", "request_id"),
    indexes={
        "request": Index(match=("request_id",), unique=True),
        "session": Index(match=("session_id",), order=("seq",)),
        # Admission, claim and settle read it: never a session's whole history of prompts.
        "unsettled": Index(match=("session_id",), where={"status": _UNSETTLED}, order=("seq",)),
    },
)
ATTEMPT: Kind[AttemptRecord] = Kind(
    "attempt",
    AttemptRecord,
    key=("submission_id", "number"),
    versioned=True,
    indexes={"submission": Index(match=("submission_id",), order=("number",))},
)
TURN: Kind[TurnRecord] = Kind("turn", TurnRecord, key=("id",), versioned=True, indexes={})
MODEL_CALL: Kind[ModelCallRecord] = Kind(
    "model_call",
    ModelCallRecord,
    key=("turn_id", "round"),
    versioned=False,
    indexes={"turn": Index(match=("turn_id",), order=("round",))},
)
TOOL_TASK: Kind[ToolTaskRecord] = Kind(
    "tool_task",
    ToolTaskRecord,
    key=("id",),
    versioned=True,
    columns=("session_id", "turn_id", "round", "index"),
    fixed=("session_id", "turn_id", "round", "index"),
    indexes={
        "turn": Index(match=("turn_id",), order=("round", "index")),
        # The conversation re-reads the rounds that changed: one round, not the turn.
        "turn_round": Index(match=("turn_id", "round"), order=("index",)),
        # Each round's tasks together, by index: in the order they were written (SQLite,
        # Redis) or by turn id (DynamoDB's sort key); the model step's history reads it.
        "session": Index(match=("session_id",)),
    },
)
MESSAGE: Kind[MessageRecord] = Kind(
    "message",
    MessageRecord,
    key=("session_id", "seq"),
    versioned=False,
    indexes={"session": Index(match=("session_id",), order=("seq",))},
)
EVENT: Kind[EventRecord] = Kind(
    "event",
    EventRecord,
    key=("session_id", "seq"),
    versioned=False,
    indexes={"session": Index(match=("session_id",), order=("seq",))},
)

KINDS: tuple[Kind[Any], ...] = (
    SESSION,
    SUBMISSION,
    ATTEMPT,
    TURN,
    MODEL_CALL,
    TOOL_TASK,
    MESSAGE,
    EVENT,
)
_BY_CLASS: dict[type, Kind[Any]] = {kind.cls: kind for kind in KINDS}


def kind_of(record: R) -> Kind[R]:
    """The kind of ``record``; TypeError for anything that is not a stored record."""
    try:
        kind = _BY_CLASS[type(record)]
    except KeyError:
        raise TypeError(f"{type(record).__name__} is not a kind of stored record") from None
    result: Kind[R] = kind
    return result
