"""The routes that drive turns: ``POST /chat`` (admit and stream), ``GET /chat`` (reconnect),
``POST /steer``, ``POST /abort``, ``POST /sessions/{id}/answer`` and the signed ``POST /wake``.
Each makes one journal transition, enqueues a wake, and answers.
"""

from __future__ import annotations

import base64
import binascii
import logging

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fxdurable.core.events import SETTLED_EVENTS
from fxdurable.core.journal import Admission
from fxdurable.core.records import AttachmentRef, EventRecord
from fxdurable.errors import (
    AgentBusyError,
    AgentMismatchError,
    AttachmentError,
    InvalidAnswerError,
    NoPendingQuestionError,
    RequestConflictError,
    SessionNotFoundError,
    SteeringFullError,
)
from fxdurable.http.problems import ApiError, session_not_found
from fxdurable.http.route_base import (
    NDJSON,
    RouteBase,
    cursor_param,
    json_reply,
    parse_body,
    request_id_for,
    session_id_param,
)
from fxdurable.http.schemas import (
    AbortReply,
    AbortRequest,
    AnswerReply,
    AnswerRequest,
    AttachmentIn,
    ChatReceipt,
    ChatRequest,
    SteerReply,
    SteerRequest,
    WakeReply,
    WakeRequest,
)
from fxdurable.http.scoping import (
    namespace,
    public_session_id,
)
from fxdurable.http.signing import SIGNATURE_HEADER, SignatureError, verify_wake
from fxdurable.http.stream import long_poll, tail
from fxdurable.runtime import tracing
from fxdurable.runtime.answers import answer_of, record_answer
from fxdurable.runtime.attachments import store_attachments
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.models.base import Attachment

__all__ = ["TurnRoutes"]

log = logging.getLogger("fxdurable.http")


class TurnRoutes(RouteBase):
    # -- chat ------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        principal = await self.principal(request)
        body = await self._body(request, ChatRequest)
        self._check_length(body.prompt, "prompt")
        request_id = request_id_for(principal, request.headers.get("idempotency-key"))
        agent = self._agent(body.agent)
        with tracing.turn(agent, remote_parent=request.headers.get("traceparent")) as span:
            refs = await self._attachments(body)
            admission = await self._admit(
                principal, body, agent, request_id, span.trace_parent, refs
            )
            span.admitted(admission.submission, created=admission.created)
            sub = admission.submission
            key = sub.session_id
            await self._wake(key, "submitted")
        headers = {
            "X-Fxd-Session-Id": public_session_id(key),
            "X-Fxd-Submission-Id": sub.id,
            "Cache-Control": "no-store",
        }
        from_line = max(0, sub.cursor - 1)  # its turn_start line comes next
        if self._settings.mode == "receipt":
            receipt = ChatReceipt(
                session_id=public_session_id(key), submission_id=sub.id, cursor=from_line
            )
            reply = json_reply(receipt, status=202)
            reply.headers.update(headers)
            return reply

        def ends_this_turn(event: EventRecord) -> bool:
            return event.type in SETTLED_EVENTS and event.data.get("submission") == sub.id

        lines = tail(
            self._events_reader(key),
            public_session_id(key),
            from_line,
            self._settings,
            until=ends_this_turn,
            read_progress=self._progress_reader(key),
        )
        return StreamingResponse(lines, media_type=NDJSON, headers=headers)

    async def _attachments(self, body: ChatRequest) -> tuple[AttachmentRef, ...]:
        """The body's attachments checked and their blobs put (before the admission); a bad
        one is a 422 problem with nothing written."""
        if not body.attachments:
            return ()
        try:
            given = [_attachment(a) for a in body.attachments]
            return await durable(store_attachments, self._rt.journal.store.put_blob, given)
        except AttachmentError as exc:
            raise ApiError(422, "invalid_attachment", str(exc), error="AttachmentError") from None

    async def _admit(
        self,
        principal: str,
        body: ChatRequest,
        agent: str,
        request_id: str | None,
        trace_parent: str | None = None,
        attachments: tuple[AttachmentRef, ...] = (),
    ) -> Admission:
        """Admit ``body`` for ``principal``; the journal's refusals become API errors, which
        name the session by the public id the caller knows.

        Without a ``sessionId`` the journal starts a session in the caller's namespace, or,
        for a retried ``Idempotency-Key``, finds the one the first try started (racing
        retries included).
        """
        public = body.session_id
        key, owner = (None, principal) if public is None else await self._target(principal, public)
        try:
            return await durable(
                self._rt.journal.admit,
                key,
                agent=agent,
                prompt=body.prompt,
                request_id=request_id,
                when_busy=body.when_busy,
                owner=owner,
                new_session_prefix=namespace(principal),
                trace_parent=trace_parent,
                attachments=attachments,
                retention_days=self._rt.agents[agent].retention_days,
            )
        except SessionNotFoundError as exc:
            raise session_not_found(public_session_id(exc.session_id)) from None
        except AgentBusyError as exc:
            busy = AgentBusyError(public_session_id(exc.session_id))
            raise ApiError(409, "agent_busy", str(busy), error="AgentBusyError") from None
        except RequestConflictError:
            raise ApiError(
                409,
                "idempotency_conflict",
                "this Idempotency-Key was used for another request; a retry must repeat the "
                "same session and prompt, new work needs a new key",
                error="RequestConflictError",
            ) from None
        except AgentMismatchError as exc:
            mismatch = AgentMismatchError(
                public_session_id(exc.session_id), exc.bound_to, exc.asked
            )
            raise ApiError(
                409, "agent_mismatch", str(mismatch), error="AgentMismatchError"
            ) from None

    async def reconnect(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = session_id_param(request.query_params.get("sessionId"))
        session = await self._owned(principal, public)
        cursor = cursor_param(request.query_params.get("cursor"), session)
        if self._settings.mode == "receipt":
            body = await long_poll(self._events_reader(session.id), public, cursor, self._settings)
            return Response(body, media_type=NDJSON, headers={"Cache-Control": "no-store"})
        lines = tail(
            self._events_reader(session.id),
            public,
            cursor,
            self._settings,
            idle_timeout_s=self._settings.idle_timeout_s,
            read_progress=self._progress_reader(session.id),
        )
        return StreamingResponse(lines, media_type=NDJSON, headers={"Cache-Control": "no-store"})

    # -- steering and abort ----------------------------------------------------------------

    async def steer(self, request: Request) -> Response:
        principal = await self.principal(request)
        body = await self._body(request, SteerRequest)
        self._check_length(body.text, "text")
        key, owner = await self._target(principal, body.session_id)
        try:
            steering = await durable(self._rt.journal.steer, key, body.text, owner=owner)
        except SessionNotFoundError:
            raise session_not_found(body.session_id) from None
        except SteeringFullError as exc:
            full = SteeringFullError(body.session_id, exc.limit)
            raise ApiError(429, "steering_full", str(full), error="SteeringFullError") from None
        await self._wake(key, "steer")
        reply = SteerReply(
            session_id=body.session_id,
            steered=steering.steered,
            submission_id=steering.submission.id,
            cursor=steering.cursor,
        )
        return json_reply(reply)

    async def abort(self, request: Request) -> Response:
        principal = await self.principal(request)
        body = await self._body(request, AbortRequest)
        session = await self._owned(principal, body.session_id)
        marked = await durable(self._rt.journal.request_abort, session.id)
        await self._wake(session.id, "abort")
        return json_reply(AbortReply(session_id=body.session_id, aborted=marked))

    async def answer(self, request: Request) -> Response:
        """The answer to the question the caller's session waits on: durable, then a wake."""
        principal = await self.principal(request)
        public = session_id_param(request.path_params["session_id"])
        body = await self._body(request, AnswerRequest)
        key, owner = await self._target(principal, public)
        try:
            answer = answer_of(body.answer, body.reason, body.input)
            record = await durable(
                record_answer, self._rt.journal, self._rt.agents, key, answer, owner=owner
            )
        except SessionNotFoundError:
            raise session_not_found(public) from None
        except NoPendingQuestionError:
            message = str(NoPendingQuestionError(public))
            raise ApiError(
                409, "no_pending_question", message, error="NoPendingQuestionError"
            ) from None
        except InvalidAnswerError as exc:
            raise ApiError(422, "invalid_answer", str(exc), error="InvalidAnswerError") from None
        await self._wake(record.session_id, "answer")  # a surfaced child question: the child
        session = await durable(self._rt.journal.read, lambda v: v.get_session(key))
        cursor = 0 if session is None else session.next_event_seq - 1
        reply = AnswerReply(
            session_id=public, submission_id=record.id, answer=body.answer, cursor=cursor
        )
        return json_reply(reply)

    # -- the wake handler ------------------------------------------------------------------

    async def wake(self, request: Request) -> Response:
        secret = self._settings.wake_secret
        if secret is None:
            raise ApiError(
                404, "wake_disabled", "POST /wake is off: set FXD_WAKE_SECRET to enable it"
            )
        raw = await self._raw_body(request)
        try:
            verify_wake(
                secret,
                raw,
                request.headers.get(SIGNATURE_HEADER),
                window_s=self._settings.wake_window_s,
            )
        except SignatureError as exc:
            raise ApiError(401, "bad_signature", str(exc)) from None
        body = parse_body(WakeRequest, raw)
        session = await durable(self._rt.journal.read, lambda v: v.get_session(body.session_id))
        if session is None:
            raise session_not_found(body.session_id)
        log.info("signed wake for %s (%s)", body.session_id, body.reason or "no reason given")
        tracing.set_wake_parent(request.headers.get("traceparent"))  # this request's task only
        await self._rt.wake(body.session_id, budget_s=self._settings.wake_budget_s)
        after = await durable(self._rt.journal.read, lambda v: v.get_session(body.session_id))
        status = after.status.value if after is not None else "unknown"
        return json_reply(WakeReply(session_id=body.session_id, status=status))


def _attachment(given: AttachmentIn) -> Attachment:
    """What a body's attachment is; base64 that does not decode is an AttachmentError."""
    data = None
    if given.data is not None:
        try:
            data = base64.b64decode(given.data, validate=True)
        except (binascii.Error, ValueError):
            raise AttachmentError("an attachment's data is not base64") from None
    return Attachment(media_type=given.media_type, data=data, url=given.url, name=given.name)
