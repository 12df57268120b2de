"""The body of a wake on a queue that carries bytes (SQS, PostgreSQL): what every queue
worker decodes, whichever queue delivered it.

``{"v": 1, "session": ..., "reason": ..., "traceparent": ...}`` (the last only when traced).
One codec for every queue, in a module that imports nothing of any queue's client, so the
worker loop (:mod:`fxdurable.workers.queue_worker`) and the Postgres queue need no boto3.
"""

from __future__ import annotations

import json
from typing import Any

from fxdurable.errors import QueueError

__all__ = ["WAKE_VERSION", "decode_wake", "encode_wake"]

WAKE_VERSION = 1


def encode_wake(session_id: str, reason: str, trace_parent: str | None) -> str:
    body: dict[str, Any] = {"v": WAKE_VERSION, "session": session_id, "reason": reason}
    if trace_parent:
        body["traceparent"] = trace_parent
    return json.dumps(body, separators=(",", ":"))


def decode_wake(body: str | bytes) -> tuple[str, str, str | None]:
    """``(session_id, reason, trace_parent)`` from a body :func:`encode_wake` made. Raises
    :class:`~fxdurable.errors.QueueError` for anything else (a poison message)."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError) as exc:
        raise QueueError(f"a message that is not a wake (not JSON): {exc}") from None
    if not isinstance(data, dict) or data.get("v") != WAKE_VERSION:
        raise QueueError(f"a message that is not a version-{WAKE_VERSION} wake: {body!r:.200}")
    session, reason, trace_parent = data.get("session"), data.get("reason"), data.get("traceparent")
    if not (isinstance(session, str) and session and isinstance(reason, str)):
        raise QueueError(f"a wake without a session id and a reason: {body!r:.200}")
    if trace_parent is not None and not isinstance(trace_parent, str):
        raise QueueError(f"a wake whose traceparent is not a string: {body!r:.200}")
    return session, reason, trace_parent
