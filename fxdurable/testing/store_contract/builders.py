"""Record builders and small helpers of the store contract suite, public for a store's own
tests: each builder makes a valid record with plain defaults, and keyword arguments replace
any field (``a_session("s2", status=SessionStatus.IDLE)``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fxdurable.core.records import (
    EventRecord,
    SessionRecord,
    SubmissionRecord,
    ToolTaskRecord,
)
from fxdurable.core.states import (
    SessionStatus,
    SubmissionStatus,
    ToolTaskStatus,
)
from fxdurable.core.store import ReadView, Store, Tx

__all__ = ["Boom", "a_session", "a_submission", "a_task", "an_event", "look", "write"]


# -- record builders -------------------------------------------------------------------------
def a_session(sid: str = "s1", **kw: Any) -> SessionRecord:
    fields: dict[str, Any] = {
        "id": sid,
        "agent": "agent",
        "status": SessionStatus.ACTIVE,
        "created_at": 1.0,
    }
    return SessionRecord(**(fields | kw))


def a_submission(sid: str = "s1", seq: int = 1, **kw: Any) -> SubmissionRecord:
    fields: dict[str, Any] = {
        "id": f"{sid}-sub{seq}",
        "session_id": sid,
        "seq": seq,
        "request_id": f"{sid}-req{seq}",
        "prompt": f"prompt {seq}",
        "status": SubmissionStatus.QUEUED,
        "created_at": 1.0,
    }
    return SubmissionRecord(**(fields | kw))


def an_event(sid: str = "s1", seq: int = 1, **kw: Any) -> EventRecord:
    fields: dict[str, Any] = {
        "session_id": sid,
        "seq": seq,
        "type": f"e{seq}",
        "turn_id": None,
        "data": {"n": seq},
        "at": float(seq),
    }
    return EventRecord(**(fields | kw))


def a_task(turn_id: str = "t1", round_: int = 0, index: int = 0, **kw: Any) -> ToolTaskRecord:
    fields: dict[str, Any] = {
        "id": f"{turn_id}/r{round_}/t{index}",
        "session_id": "s1",
        "turn_id": turn_id,
        "round": round_,
        "index": index,
        "tool": "shell",
        "arguments": "{}",
        "provider_id": None,
        "policy": "unsafe",
        "status": ToolTaskStatus.PENDING,
        "execution_id": "x1",
        "updated_at": 1.0,
    }
    return ToolTaskRecord(**(fields | kw))


def write(store: Store, body: Callable[[Tx], Any]) -> Any:
    return store.transact(body)


def look(store: Store, body: Callable[[ReadView], Any]) -> Any:
    return store.read(body)


class Boom(Exception):
    pass
