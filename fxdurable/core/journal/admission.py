"""Admission: a prompt becomes a queued submission, idempotent on its request id."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from fxdurable.core.crash import crash_point
from fxdurable.core.events import EventType, SessionCreated
from fxdurable.core.records import AttachmentRef, SessionRecord, SubmissionRecord
from fxdurable.core.states import SessionStatus
from fxdurable.core.store import Tx
from fxdurable.errors import AgentBusyError, AgentMismatchError, RequestConflictError

from ._base import Transitions, _visible
from ._scope import _SessionScope


@dataclass(frozen=True, slots=True)
class Admission:
    submission: SubmissionRecord
    created: bool  # False: the request id was seen before and this is the same submission


class Admissions(Transitions):
    def admit(
        self,
        session_id: str | None,
        *,
        agent: str,
        prompt: str,
        request_id: str | None = None,
        when_busy: Literal["queue", "reject"] = "queue",
        owner: str | None = None,
        new_session_prefix: str = "",
        trace_parent: str | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
        retention_days: float | None = None,
    ) -> Admission:
        """Admit a prompt as a queued submission; idempotent on ``request_id``.

        The busy check and the insert are one transaction, so ``when_busy="reject"`` cannot
        race a concurrent admission. ``owner`` is the caller's identity (HTTP): a new session
        records it, an existing one must match it or the session is reported as not found.
        ``None`` is a trusted in-process caller. ``session_id=None`` starts a new session,
        unless ``request_id`` was admitted before: a retry then finds that submission (and
        its session) in the same transaction, however many retries race. A session started
        that way gets a fresh id after ``new_session_prefix`` (HTTP puts it in the caller's
        namespace, ``alice/``: :mod:`fxdurable.http.scoping`).
        ``trace_parent`` (a W3C traceparent) is kept on the submission for its attempts' spans.
        ``attachments``: the prompt's images and documents, their blobs already put (a retry
        must repeat them, as it repeats the prompt). ``retention_days``: the agent's, recorded
        on the session (the retention sweep reads it there: core/retention.py).
        """
        if when_busy not in ("queue", "reject"):
            raise ValueError(f"when_busy must be 'queue' or 'reject', not {when_busy!r}")
        request = request_id or self._ids.new_id("req")
        submission_id = self._ids.new_id("sub")
        new_session_id = session_id or new_session_prefix + self._ids.new_id("ses")

        def body(tx: Tx, scope: _SessionScope) -> Admission:
            existing = tx.get_submission_by_request(request)
            if existing is not None:
                asked = existing.session_id if session_id is None else session_id
                if (
                    existing.session_id != asked
                    or existing.prompt != prompt
                    or existing.attachments != attachments
                ):
                    raise RequestConflictError(
                        f"request id {request!r} was already used for another submission "
                        f"(session {existing.session_id!r}); a retry must repeat the same "
                        "session and prompt, new work needs a new request id"
                    )
                _visible(tx.get_session(asked), asked, owner)
                return Admission(existing, created=False)
            session = tx.get_session(new_session_id)
            if session is None:
                scope.create(
                    SessionRecord(
                        id=new_session_id,
                        agent=agent,
                        owner=owner,
                        status=SessionStatus.IDLE,
                        created_at=scope.now,
                        retention_days=retention_days,
                    )
                )
                scope.emit(EventType.SESSION_CREATED, SessionCreated(agent=agent))
            else:
                _visible(session, new_session_id, owner)
                if session.agent != agent:
                    raise AgentMismatchError(new_session_id, session.agent, agent)
                if when_busy == "reject" and session.status == SessionStatus.ACTIVE:
                    raise AgentBusyError(new_session_id)
                scope.open(session)
                if session.retention_days != retention_days:
                    scope.session = replace(session, retention_days=retention_days)
            submission = self._queue_submission(
                tx,
                scope,
                prompt,
                submission_id=submission_id,
                request=request,
                trace_parent=trace_parent,
                attachments=attachments,
            )
            return Admission(submission, created=True)

        admission = self._transition(None, body)
        if admission.created:
            crash_point("submission.after-admit")
        return admission
