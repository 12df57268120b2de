"""Subagent calls (``fx.subagent``): how a call names its child session and submission.

Both derive from the call's ``execution_id``, which is stable across every re-execution of the
call (crashes, continuations, other workers): however often the parent's process dies, its
call finds the same child session and the same child submission, never a second one. The
child's session id stays in its parent's namespace (the part of the parent's key up to its
last ``/``: an HTTP principal's, see :mod:`fxdurable.http.scoping`), so whoever owns the parent
can read the child, and its public id (``sub-x…``, 35 characters) is a valid public id.
"""

from __future__ import annotations

__all__ = ["CHILD_REQUEST_PREFIX", "child_failure", "child_request_id", "child_session_id"]

CHILD_REQUEST_PREFIX = "subagent:"


def child_session_id(parent_session_id: str, execution_id: str) -> str:
    """The child session of the call with ``execution_id`` in ``parent_session_id``."""
    namespace = parent_session_id[: parent_session_id.rfind("/") + 1]
    return f"{namespace}sub-{execution_id}"


def child_request_id(execution_id: str) -> str:
    """The request id of the child's one submission (admission is idempotent on it)."""
    return CHILD_REQUEST_PREFIX + execution_id


def child_failure(child_session: str, outcome: str, reason: str) -> str:
    """What the parent's model reads when the child did not complete: the child's session id
    comes first, so an operator (and the invariant checker) can follow the call to it."""
    return f"subagent session {child_session} {outcome}: {reason}"
