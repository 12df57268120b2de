"""``GET /sessions?state=&limit=&after=``: the caller's sessions, newest updated first.

What it reads: every session record once (``ReadView.list_sessions``: one query on SQLite; on
DynamoDB a Query of the session index and one BatchGetItem of the heads; on Redis a ZRANGE
and an MGET), then, for each *active* session it lists, its unsettled submissions
(``unsettled_submissions``). An idle session costs nothing more: its row comes from its record
alone, which keeps its latest update time and last outcome (``SessionRecord.updated_at``,
``last_outcome``). No event, message or settled submission is read, so the cost does not grow
with a session's history. Counted on DynamoDB by tests/http/test_http_sessions_list_cost.py:
2 requests for the list, plus 2 per active session listed (its head, its unsettled index) and
1 batch of their submissions.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from starlette.datastructures import QueryParams

from fxdurable.core.asking import waits_for_input
from fxdurable.core.records import SessionRecord
from fxdurable.core.states import SessionStatus, SubmissionStatus
from fxdurable.core.store import ReadView
from fxdurable.http.problems import ApiError
from fxdurable.http.schemas import SessionsReply, SessionSummary
from fxdurable.http.scoping import public_session_id
from fxdurable.http.visibility import visible

__all__ = ["SESSION_STATES", "SessionsQuery", "list_sessions"]

SESSION_STATES = ("idle", "queued", "running", "waiting")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200


@dataclass(frozen=True, slots=True)
class SessionsQuery:
    states: frozenset[str]  # empty: every state
    limit: int
    after: tuple[float, str] | None  # the last row of the previous page: (updated, id)

    @classmethod
    def parse(cls, params: QueryParams) -> SessionsQuery:
        states = params.getlist("state")
        unknown = [s for s in states if s not in SESSION_STATES]
        if unknown:
            raise ApiError(
                400,
                "bad_state",
                f"state is one of {', '.join(SESSION_STATES)}, not {unknown[0][:40]!r}",
            )
        raw_limit = params.get("limit", str(DEFAULT_LIMIT))  # "limit=" is no number either
        # isdigit() alone accepts '²', which int() refuses; the length bounds int()'s work.
        digits = raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 6
        limit = int(raw_limit) if digits else 0
        if not 1 <= limit <= MAX_LIMIT:
            raise ApiError(400, "bad_limit", f"limit is a whole number from 1 to {MAX_LIMIT}")
        after = params.get("after")
        return cls(frozenset(states), limit, None if after is None else _decode(after))


def _encode(updated: float, session_id: str) -> str:
    raw = json.dumps([updated, session_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(after: str) -> tuple[float, str]:
    try:
        value = json.loads(base64.urlsafe_b64decode(after + "=" * (-len(after) % 4)))
        updated, session_id = value
        if isinstance(updated, int | float) and isinstance(session_id, str):
            return float(updated), session_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        pass
    raise ApiError(400, "bad_after", "after is the `next` of a previous page, unchanged")


def _updated(session: SessionRecord) -> float:
    return session.updated_at if session.updated_at is not None else session.created_at


def _outcome(session: SessionRecord) -> str | None:
    outcome = session.last_outcome
    return outcome if outcome in ("completed", "failed", "aborted") else None


def summarize(view: ReadView, session: SessionRecord) -> SessionSummary:
    """The session's row: its record alone when idle, plus its unsettled submissions."""
    state, question, unsettled = "idle", None, 0
    if session.status == SessionStatus.ACTIVE:
        subs = view.unsettled_submissions(session.id)
        unsettled = len(subs)
        waiting = [s for s in subs if waits_for_input(s)]
        if waiting:
            state = "waiting"
            request = waiting[0].input_request
            question = None if request is None else request.question
        elif any(s.status == SubmissionStatus.RUNNING for s in subs):
            state = "running"
        elif subs:
            state = "queued"
    return SessionSummary(
        id=public_session_id(session.id),
        agent=session.agent,
        state=state,
        last_outcome=_outcome(session),
        unsettled=unsettled,
        question=question,
        created_at=session.created_at,
        updated_at=_updated(session),
    )


def list_sessions(
    view: ReadView, principal: str, query: SessionsQuery, show_unowned: bool
) -> SessionsReply:
    mine = [s for s in view.list_sessions() if visible(s, principal, show_unowned)]
    mine.sort(key=lambda s: (_updated(s), s.id), reverse=True)
    if query.after is not None:
        mine = [s for s in mine if (_updated(s), s.id) < query.after]
    rows: list[SessionSummary] = []
    last: SessionRecord | None = None
    for session in mine:
        if len(rows) == query.limit:
            return SessionsReply(sessions=rows, next=None if last is None else _cursor(last))
        row = summarize(view, session)
        if query.states and row.state not in query.states:
            continue
        rows.append(row)
        last = session
    return SessionsReply(sessions=rows, next=None)


def _cursor(session: SessionRecord) -> str:
    return _encode(_updated(session), session.id)
