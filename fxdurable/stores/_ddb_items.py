"""The DynamoDB store's items: their keys (the single-table layout) and their attributes.

See :mod:`fxdurable.stores.dynamodb` for the layout. Ids that go into a sort key *prefix*
(a turn's tasks) are written ``<length>:<id>``, so no id (ids may contain ``#``) can make one
turn's range hold another turn's items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVE",
    "HEAD",
    "RETAIN",
    "SCHEMA",
    "SESSIONS",
    "SESSION_PREFIX",
    "Item",
    "Key",
    "attempt",
    "event",
    "from_wire",
    "message",
    "model_call",
    "pointer",
    "request",
    "retain_sk",
    "retained_id",
    "session_head",
    "submission",
    "task",
    "task_prefix",
    "to_wire",
    "turn",
    "unsettled",
    "versioned",
]

Key = tuple[str, str]  # (pk, sk)

SESSION_PREFIX = "S#"  # the pk of a session's partition is this and its id
HEAD = "#"  # the sort key of a partition's head: its version ``sv`` (and a session's record)
SESSIONS = "SESSIONS"  # pk of the index of every session: sk = session id
ACTIVE = "ACTIVE"  # pk of the index of active sessions: sk = session id
# pk of the retention index (core/retention.py): sk = :func:`retain_sk`, earliest due first.
RETAIN = "RETAIN"
SCHEMA: Key = ("#SCHEMA", HEAD)
_MAX = 10**12  # sequence numbers and positions are written zero-padded to 12 digits


def _n(number: int) -> str:
    if not 0 <= number < _MAX:
        raise ValueError(f"a sequence number or position out of range: {number}")
    return f"{number:012d}"


def _id(value: str) -> str:
    return f"{len(value)}:{value}"


_DUE_WIDTH = 20  # retain_until, zero-padded: sort keys in time order for any epoch time


def retain_sk(retain_until: float, session_id: str) -> str:
    """The retention index's sort key of a session due at ``retain_until``."""
    return f"{retain_until:0{_DUE_WIDTH}.3f}#{session_id}"


def retained_id(sk: str) -> str:
    """The session id of a retention index sort key (:func:`retain_sk`)."""
    return sk[_DUE_WIDTH + 1 :]


def session_pk(session_id: str) -> str:
    return f"{SESSION_PREFIX}{session_id}"


def session_head(session_id: str) -> Key:
    return (session_pk(session_id), HEAD)


def submission(session_id: str, seq: int) -> Key:
    return (session_pk(session_id), f"SUB#{_n(seq)}")


def unsettled(session_id: str, seq: int) -> Key:
    return (session_pk(session_id), f"UNS#{_n(seq)}")


def turn(session_id: str, turn_id: str) -> Key:
    return (session_pk(session_id), f"TURN#{turn_id}")


def task_prefix(turn_id: str, round_: int | None = None) -> str:
    prefix = f"TASK#{_id(turn_id)}#"
    return prefix if round_ is None else f"{prefix}{_n(round_)}#"


def task(session_id: str, turn_id: str, round_: int, index: int) -> Key:
    return (session_pk(session_id), f"{task_prefix(turn_id, round_)}{_n(index)}")


def message(session_id: str, seq: int) -> Key:
    return (session_pk(session_id), f"MSG#{_n(seq)}")


def event(session_id: str, seq: int) -> Key:
    return (session_pk(session_id), f"EV#{_n(seq)}")


def model_call(turn_id: str, round_: int) -> Key:
    return (f"T#{turn_id}", f"MC#{_n(round_)}")


def attempt(submission_id: str, number: int) -> Key:
    return (f"A#{submission_id}", f"AT#{_n(number)}")


def pointer(kind: str, record_id: str) -> Key:
    """Where a record looked up by its id alone lives: ``kind`` is sub, turn or task."""
    return (f"I#{kind}#{record_id}", HEAD)


def request(request_id: str) -> Key:
    return (f"R#{request_id}", HEAD)


def versioned(pk: str) -> bool:
    """Whether a partition has a head whose version every commit writing it moves: a
    session's, a turn's model calls, a submission's attempts. Pointers, request ids and the
    session indexes have none (the first two never change once written)."""
    return pk[:2] in ("S#", "T#", "A#")


@dataclass(slots=True)
class Item:
    """One item as read or written. ``body`` is the record's JSON (resolved from S3 when the
    item holds only its ``ref``); ``record`` memoises its decoding."""

    pk: str
    sk: str
    body: str | None = None
    ref: str | None = None  # sha256 hex of an offloaded body
    ver: int | None = None  # the record's version (versioned records)
    sv: int | None = None  # a head's partition version
    target: Key | None = None  # a pointer's or request id's record
    # A head's last commit's ClientRequestToken: after a commit whose answer was lost, it
    # tells whether that commit landed (see _ddb_commit).
    tok: str | None = field(default=None, compare=False)
    record: object = field(default=None, compare=False)

    @property
    def key(self) -> Key:
        return (self.pk, self.sk)


def to_wire(item: Item) -> dict[str, Any]:
    out: dict[str, Any] = {"pk": {"S": item.pk}, "sk": {"S": item.sk}}
    if item.ref is not None:
        out["o"] = {"S": item.ref}
    elif item.body is not None:
        out["b"] = {"S": item.body}
    if item.ver is not None:
        out["v"] = {"N": str(item.ver)}
    if item.sv is not None:
        out["sv"] = {"N": str(item.sv)}
    if item.target is not None:
        out["tpk"], out["tsk"] = {"S": item.target[0]}, {"S": item.target[1]}
    return out


def from_wire(raw: dict[str, Any]) -> Item:
    def num(name: str) -> int | None:
        return int(raw[name]["N"]) if name in raw else None

    target = (raw["tpk"]["S"], raw["tsk"]["S"]) if "tpk" in raw else None
    return Item(
        pk=raw["pk"]["S"],
        sk=raw["sk"]["S"],
        body=raw["b"]["S"] if "b" in raw else None,
        ref=raw["o"]["S"] if "o" in raw else None,
        ver=num("v"),
        sv=num("sv"),
        target=target,
        tok=raw["tok"]["S"] if "tok" in raw else None,
    )
