"""The routes that read sessions, and fork them: ``GET /sessions``, ``GET /sessions/{id}``
(with its running task), its history and trace, ``POST /sessions/{id}/fork``, and the
``/openapi.json`` and ``/healthz`` answers.
"""

from __future__ import annotations

import json
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fxdurable.core.records import ToolTaskRecord
from fxdurable.errors import (
    ConflictError,
    ForkPointError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    StoreUnavailableError,
)
from fxdurable.http.openapi import openapi_document
from fxdurable.http.problems import ApiError, session_not_found
from fxdurable.http.route_base import RouteBase, json_reply, session_id_param
from fxdurable.http.schemas import (
    AttachmentOut,
    ForkReply,
    ForkRequest,
    HistoryMessage,
    HistoryReply,
    RunningTask,
    SessionReply,
    SubmissionState,
)
from fxdurable.http.scoping import (
    public_session_id,
    session_key,
)
from fxdurable.http.sessions_list import SessionsQuery, list_sessions
from fxdurable.http.trace_route import trace_reply
from fxdurable.runtime.attachments import StoredAttachment
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.history import conversation
from fxdurable.runtime.models.base import Attachment, ChatMessage
from fxdurable.runtime.submission import Submission
from fxdurable.runtime.task_view import running_task

__all__ = ["SessionRoutes", "history_message", "running_task_reply"]

log = logging.getLogger("fxdurable.http")


class SessionRoutes(RouteBase):
    async def fork(self, request: Request) -> Response:
        """A new session of the caller's from this one's conversation: 201, or 200 when the
        same fork existed already. No wake: a fork starts at rest, with no work."""
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        body = await self._body(request, ForkRequest)
        new_key = session_key(principal, body.new_session_id)
        source, owner = await self._target(principal, public)
        try:
            fork = await durable(
                self._rt.journal.fork, source, new_key, after=body.after, owner=owner
            )
        except SessionNotFoundError:
            raise session_not_found(public) from None
        except SessionExistsError:
            message = str(SessionExistsError(body.new_session_id))
            raise ApiError(409, "session_exists", message, error="SessionExistsError") from None
        except ForkPointError as exc:
            raise ApiError(422, "bad_fork_point", str(exc), error="ForkPointError") from None
        except ConflictError as exc:
            # Another fork into the same new id was being made at the same moment (DynamoDB
            # stages a long fork before it commits it): nothing of this one is visible.
            log.warning("fork of %s into %s met another writer: %s", source, new_key, exc)
            message = f"another fork into {body.new_session_id!r} is being made; retry"
            raise ApiError(409, "fork_conflict", message, error="ConflictError") from None
        except StoreError as exc:
            if isinstance(exc, StoreUnavailableError):
                raise  # 503 / 507, mapped for every route
            # What the store cannot write in one fork (a record too large for it): said,
            # never a 500 with a traceback. Nothing of the fork is visible.
            log.warning("fork of %s into %s refused by the store: %s", source, new_key, exc)
            raise ApiError(
                507, "fork_too_large", f"the store cannot hold this fork: {exc}", error="StoreError"
            ) from None
        reply = ForkReply(
            session_id=body.new_session_id,
            forked_from=public,
            after=fork.after,
            messages=fork.messages,
            created=fork.created,
        )
        return json_reply(reply, 201 if fork.created else 200)

    # -- reads -----------------------------------------------------------------------------

    async def session(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        session = await self._owned(principal, public)
        subs, running = await durable(
            self._rt.journal.read,
            lambda v: (v.submissions(session.id), running_task(v, session.id)),
        )
        reply = SessionReply(
            session_id=public,
            agent=session.agent,
            status=session.status.value,
            cursor=session.next_event_seq - 1,
            steering_pending=len(session.steering),
            submissions=[
                SubmissionState(
                    id=s.id,
                    status=s.status.value,
                    prompt=s.prompt,
                    result=s.result_text,
                    output=None if s.output is None else json.loads(s.output),
                    error=None
                    if s.error is None
                    else {
                        "code": s.error.code,
                        "message": s.error.message,
                        "unknownCalls": list(s.error.unknown_calls),
                    },
                    question=Submission.of(s).question,
                )
                for s in list(subs)[-20:]
            ],
            running_task=None if running is None else running_task_reply(running),
            parent_session=None
            if session.parent_session is None
            else public_session_id(session.parent_session),
            parent_task=session.parent_task,
            state=dict(session.state),
        )
        return json_reply(reply)

    async def sessions(self, request: Request) -> Response:
        principal = await self.principal(request)
        query = SessionsQuery.parse(request.query_params)
        show_unowned = self._settings.dev
        reply = await durable(
            self._rt.journal.read, lambda v: list_sessions(v, principal, query, show_unowned)
        )
        return json_reply(reply)

    async def trace(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        session = await self._owned(principal, public)
        reply = await durable(self._rt.journal.read, lambda v: trace_reply(v, session.id, public))
        if reply is None:
            raise session_not_found(public)
        return json_reply(reply)

    async def history(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        session = await self._owned(principal, public)
        messages = await durable(self._rt.journal.read, lambda v: conversation(v, session.id))
        reply = HistoryReply(
            session_id=public,
            messages=[history_message(m) for m in messages],
        )
        return json_reply(reply)

    # -- the rest --------------------------------------------------------------------------

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:
            self._openapi = openapi_document()
        return JSONResponse(self._openapi)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})


def running_task_reply(task: ToolTaskRecord) -> RunningTask:
    return RunningTask(
        task_id=task.id,
        tool=task.tool,
        turn_id=task.turn_id,
        progress=task.progress,
        progress_at=task.progress_at,
        child_session=None if task.child_session is None else public_session_id(task.child_session),
    )


def history_message(message: ChatMessage) -> HistoryMessage:
    """One conversation entry as ``GET /sessions/{id}/history`` shows it. ``interrupted`` marks
    a reply a crash cut off mid-stream (its text is what had been streamed)."""
    return HistoryMessage(
        role=message.role,
        text=message.text,
        tool_calls=[
            {"name": c.name, "arguments": c.arguments, "id": c.provider_id}
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        tool_name=message.tool_name,
        interrupted=message.interrupted,
        attachments=[attachment_out(a) for a in message.attachments],
    )


def attachment_out(attachment: Attachment) -> AttachmentOut:
    """A history entry's attachment as refs: the records' digest and size, never bytes."""
    stored = attachment if isinstance(attachment, StoredAttachment) else None
    return AttachmentOut(
        media_type=attachment.media_type,
        digest=stored.digest if stored is not None else None,
        size=stored.size if stored is not None else 0,
        url=attachment.url,
        name=attachment.name,
    )
