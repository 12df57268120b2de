"""The ASGI application: thin routes over a :class:`~fxdurable.Runtime` (DESIGN §2).

A route authenticates, checks that the caller owns the session, makes one journal transition
(admit, steer, abort) or read, enqueues a wake, and answers. No agent logic lives here: with
the local queue the turn runs in this process's own workers (the lowest latency), with a
remote queue workers elsewhere run it and the stream shows what they record.

Session ids are scoped per principal (:mod:`fxdurable.http.scoping`): a route turns the
caller's public id into the session's store key on the way in, and shows the public id on
the way out, in headers, replies and stream lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pydantic
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fxdurable.core.events import SETTLED_EVENTS
from fxdurable.core.journal import Admission
from fxdurable.core.records import EventRecord, SessionRecord, ToolTaskRecord
from fxdurable.errors import (
    AgentBusyError,
    AgentMismatchError,
    ConflictError,
    ForkPointError,
    InvalidAnswerError,
    NoPendingQuestionError,
    RequestConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SteeringFullError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
)
from fxdurable.http import console_static
from fxdurable.http.auth import Authenticate
from fxdurable.http.demo_mode import DemoWorker, demo_routes
from fxdurable.http.lines import Progress
from fxdurable.http.openapi import openapi_document
from fxdurable.http.problems import ApiError, invalid, session_not_found, unauthorized
from fxdurable.http.schemas import (
    AbortReply,
    AbortRequest,
    AnswerReply,
    AnswerRequest,
    ChatReceipt,
    ChatRequest,
    ForkReply,
    ForkRequest,
    HistoryMessage,
    HistoryReply,
    RunningTask,
    SessionReply,
    SteerReply,
    SteerRequest,
    SubmissionState,
    WakeReply,
    WakeRequest,
)
from fxdurable.http.scoping import (
    SESSION_ID_PATTERN,
    namespace,
    public_session_id,
    session_key,
)
from fxdurable.http.sessions_list import SessionsQuery, list_sessions
from fxdurable.http.settings import HttpSettings
from fxdurable.http.signing import SIGNATURE_HEADER, SignatureError, verify_wake
from fxdurable.http.stream import ReadEvents, ReadProgress, RunningProgress, long_poll, tail
from fxdurable.http.trace_route import trace_reply
from fxdurable.http.visibility import find_session
from fxdurable.runtime import tracing
from fxdurable.runtime.answers import answer_of, record_answer
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.history import conversation
from fxdurable.runtime.models.base import ChatMessage
from fxdurable.runtime.runtime import Runtime
from fxdurable.runtime.submission import Submission
from fxdurable.runtime.task_view import running_task

__all__ = ["create_app"]

log = logging.getLogger("fxdurable.http")

_Body = TypeVar("_Body", bound=pydantic.BaseModel)
_NDJSON = "application/x-ndjson"
_EVENTS_PER_READ = 200
_IDEMPOTENCY_KEY_MAX = 200


def create_app(
    runtime: Runtime,
    *,
    authenticate: Authenticate,
    settings: HttpSettings | None = None,
    manage_runtime: bool = True,
    console_dir: Path = console_static.STATIC_DIR,
    demo: DemoWorker | None = None,
) -> Starlette:
    """The fxdurable HTTP API over ``runtime``.

    ``authenticate(request)`` returns the caller's principal or None (401). With
    ``manage_runtime`` the app starts the runtime on startup and closes it on shutdown; pass
    False when mounting it in an app that manages the runtime itself. ``console_dir`` holds
    the web console's files (``GET /console``), the package's own by default. ``demo`` (demo
    mode: the runtime runs no turns, that worker process does) adds ``GET /demo`` and
    ``POST /demo/crash``.
    """
    settings = settings or HttpSettings()
    api = _Api(runtime, authenticate, settings)
    console = console_static.ConsoleFiles(console_dir)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_runtime:
            await runtime.start()
        try:
            yield
        finally:
            if manage_runtime:
                await runtime.aclose()

    routes = [
        Route("/chat", api.chat, methods=["POST"]),
        Route("/sessions", api.sessions, methods=["GET"]),
        Route("/chat", api.reconnect, methods=["GET"]),
        Route("/steer", api.steer, methods=["POST"]),
        Route("/abort", api.abort, methods=["POST"]),
        Route("/sessions/{session_id}", api.session, methods=["GET"]),
        Route("/sessions/{session_id}/history", api.history, methods=["GET"]),
        Route("/sessions/{session_id}/trace", api.trace, methods=["GET"]),
        Route("/sessions/{session_id}/fork", api.fork, methods=["POST"]),
        Route("/sessions/{session_id}/answer", api.answer, methods=["POST"]),
        Route("/wake", api.wake, methods=["POST"]),
        Route("/openapi.json", api.openapi, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/console", console.index, methods=["GET", "HEAD"]),
        Route("/console/{path:path}", console.asset, methods=["GET", "HEAD"]),
        *([] if demo is None else demo_routes(demo, api.principal)),
    ]
    if settings.dev:
        routes.append(Route("/", console_static.to_console, methods=["GET", "HEAD"]))
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            StoreUnavailableError: _store_unavailable,
            Exception: _unexpected,
        },
    )
    # For whoever runs the app without its lifespan (the Lambda adapter), to close it.
    app.state.runtime = runtime
    return app


class _Api:
    def __init__(self, runtime: Runtime, authenticate: Authenticate, settings: HttpSettings):
        self._rt = runtime
        self._authenticate = authenticate
        self._settings = settings
        self._openapi: dict[str, Any] | None = None  # built on first request (cold starts)

    # -- chat ------------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        principal = await self.principal(request)
        body = await self._body(request, ChatRequest)
        self._check_length(body.prompt, "prompt")
        request_id = _request_id(principal, request.headers.get("idempotency-key"))
        agent = self._agent(body.agent)
        with tracing.turn(agent, remote_parent=request.headers.get("traceparent")) as span:
            admission = await self._admit(principal, body, agent, request_id, span.trace_parent)
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
            reply = _json(receipt, status=202)
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
        return StreamingResponse(lines, media_type=_NDJSON, headers=headers)

    async def _admit(
        self,
        principal: str,
        body: ChatRequest,
        agent: str,
        request_id: str | None,
        trace_parent: str | None = None,
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
        public = _session_id(request.query_params.get("sessionId"))
        session = await self._owned(principal, public)
        cursor = _cursor(request.query_params.get("cursor"), session)
        if self._settings.mode == "receipt":
            body = await long_poll(self._events_reader(session.id), public, cursor, self._settings)
            return Response(body, media_type=_NDJSON, headers={"Cache-Control": "no-store"})
        lines = tail(
            self._events_reader(session.id),
            public,
            cursor,
            self._settings,
            idle_timeout_s=self._settings.idle_timeout_s,
            read_progress=self._progress_reader(session.id),
        )
        return StreamingResponse(lines, media_type=_NDJSON, headers={"Cache-Control": "no-store"})

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
        return _json(reply)

    async def abort(self, request: Request) -> Response:
        principal = await self.principal(request)
        body = await self._body(request, AbortRequest)
        session = await self._owned(principal, body.session_id)
        marked = await durable(self._rt.journal.request_abort, session.id)
        await self._wake(session.id, "abort")
        return _json(AbortReply(session_id=body.session_id, aborted=marked))

    async def fork(self, request: Request) -> Response:
        """A new session of the caller's from this one's conversation: 201, or 200 when the
        same fork existed already. No wake: a fork starts at rest, with no work."""
        principal = await self.principal(request)
        public = _session_id(request.path_params["session_id"])
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
        return _json(reply, 201 if fork.created else 200)

    async def answer(self, request: Request) -> Response:
        """The answer to the question the caller's session waits on: durable, then a wake."""
        principal = await self.principal(request)
        public = _session_id(request.path_params["session_id"])
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
        await self._wake(key, "answer")
        session = await durable(self._rt.journal.read, lambda v: v.get_session(key))
        cursor = 0 if session is None else session.next_event_seq - 1
        reply = AnswerReply(
            session_id=public, submission_id=record.id, answer=body.answer, cursor=cursor
        )
        return _json(reply)

    # -- reads -----------------------------------------------------------------------------

    async def session(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = _session_id(request.path_params["session_id"])
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
        return _json(reply)

    async def sessions(self, request: Request) -> Response:
        principal = await self.principal(request)
        query = SessionsQuery.parse(request.query_params)
        show_unowned = self._settings.dev
        reply = await durable(
            self._rt.journal.read, lambda v: list_sessions(v, principal, query, show_unowned)
        )
        return _json(reply)

    async def trace(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = _session_id(request.path_params["session_id"])
        session = await self._owned(principal, public)
        reply = await durable(self._rt.journal.read, lambda v: trace_reply(v, session.id, public))
        if reply is None:
            raise session_not_found(public)
        return _json(reply)

    async def history(self, request: Request) -> Response:
        principal = await self.principal(request)
        public = _session_id(request.path_params["session_id"])
        session = await self._owned(principal, public)
        messages = await durable(self._rt.journal.read, lambda v: conversation(v, session.id))
        reply = HistoryReply(
            session_id=public,
            messages=[history_message(m) for m in messages],
        )
        return _json(reply)

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
        body = _parse(WakeRequest, raw)
        session = await durable(self._rt.journal.read, lambda v: v.get_session(body.session_id))
        if session is None:
            raise session_not_found(body.session_id)
        log.info("signed wake for %s (%s)", body.session_id, body.reason or "no reason given")
        tracing.set_wake_parent(request.headers.get("traceparent"))  # this request's task only
        await self._rt.wake(body.session_id, budget_s=self._settings.wake_budget_s)
        after = await durable(self._rt.journal.read, lambda v: v.get_session(body.session_id))
        status = after.status.value if after is not None else "unknown"
        return _json(WakeReply(session_id=body.session_id, status=status))

    # -- the rest --------------------------------------------------------------------------

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:
            self._openapi = openapi_document()
        return JSONResponse(self._openapi)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    # -- helpers ---------------------------------------------------------------------------

    async def principal(self, request: Request) -> str:
        """The caller's principal; 401 without valid credentials."""
        principal = await self._authenticate(request)
        if not principal:
            raise unauthorized()
        return principal

    async def _owned(self, principal: str, public_id: str) -> SessionRecord:
        """``principal``'s session ``public_id`` (its ``id`` is the store key), else 404
        (:mod:`fxdurable.http.visibility`)."""
        show_unowned = self._settings.dev
        session: SessionRecord | None = await durable(
            self._rt.journal.read, lambda v: find_session(v, principal, public_id, show_unowned)
        )
        if session is None:
            raise session_not_found(public_id)
        return session

    async def _target(self, principal: str, public_id: str) -> tuple[str, str | None]:
        """The key to write ``principal``'s session ``public_id`` at, and the owner to write
        as: under ``--dev`` an in-process session (owner None) of that id is written without
        an owner, as the code that made it would; otherwise the caller's own key."""
        key = session_key(principal, public_id)
        if not self._settings.dev:
            return key, principal
        show_unowned = True
        found: SessionRecord | None = await durable(
            self._rt.journal.read, lambda v: find_session(v, principal, public_id, show_unowned)
        )
        if found is not None and found.owner is None:
            return found.id, None
        return key, principal

    def _agent(self, name: str | None) -> str:
        agents = self._rt.agents
        if name is None:
            if len(agents) != 1:
                raise invalid(f"name the agent: this server has {', '.join(sorted(agents))}")
            return next(iter(agents))
        if name not in agents:
            raise ApiError(
                422,
                "unknown_agent",
                f"no agent {name!r} here; this server has {', '.join(sorted(agents))}",
            )
        return name

    def _check_length(self, text: str, field: str) -> None:
        limit = self._settings.max_prompt_chars
        if len(text) > limit:
            raise ApiError(
                413, "prompt_too_long", f"{field} has {len(text)} characters; the limit is {limit}"
            )

    async def _raw_body(self, request: Request) -> bytes:
        limit = self._settings.max_body_bytes
        declared = request.headers.get("content-length")
        if (
            declared is not None
            and declared.isascii()
            and declared.isdigit()
            and int(declared) > limit
        ):
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        timeout_s = self._settings.body_timeout_s
        try:
            # One deadline for the whole body, not one per chunk: a byte a second would beat
            # a per-chunk timeout forever.
            async with asyncio.timeout(timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise _too_large(limit)
                    chunks.append(chunk)
        except TimeoutError:
            raise ApiError(
                408,
                "body_timeout",
                f"the body did not arrive within {timeout_s:g} s ({size} bytes came)",
                # The rest of the body may still come: the connection cannot carry another
                # request, so the server closes it after this answer.
                headers={"Connection": "close"},
            ) from None
        return b"".join(chunks)

    async def _body(self, request: Request, model: type[_Body]) -> _Body:
        return _parse(model, await self._raw_body(request))

    async def _wake(self, session_id: str, reason: str) -> None:
        # The records are already durable: a wake lost here is found by the reconciliation
        # scans (DESIGN §9), so a queue outage must not fail a request that was accepted.
        try:
            await self._rt.queue.enqueue(session_id, reason=reason)
        except Exception:
            log.exception("could not enqueue a wake for %s; the scan will find it", session_id)

    def _events_reader(self, key: str) -> ReadEvents:
        """The session's events as its owner names it: lines carry the public id."""
        journal = self._rt.journal
        public = public_session_id(key)

        async def read(after: int) -> Sequence[EventRecord]:
            events = await durable(journal.read, lambda v: v.events(key, after, _EVENTS_PER_READ))
            return [_public_event(e, public) for e in events]

        return read

    def _progress_reader(self, key: str) -> ReadProgress:
        """The progress of the session's tool call in flight, for ``progress`` lines."""
        journal = self._rt.journal

        async def read() -> RunningProgress | None:
            task = await durable(journal.read, lambda v: running_task(v, key))
            if task is None or task.progress is None:
                return None
            return RunningProgress(
                turn_id=task.turn_id,
                at=task.progress_at or task.updated_at,
                data=Progress(task=task.id, tool=task.tool, text=task.progress),
            )

        return read


# -- parsing ---------------------------------------------------------------------------------


def _parse(model: type[_Body], raw: bytes) -> _Body:
    if not raw.strip():
        raise ApiError(400, "malformed_json", "the body is empty; expected a JSON object")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "malformed_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # not a ValueError: '[' * 100_000 would answer 500
        raise ApiError(400, "malformed_json", "the body's JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise invalid(f"expected a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise invalid("; ".join(problems[:5])) from None


def _session_id(value: str | None) -> str:
    if value is None:
        raise invalid("sessionId is required")
    if not re.fullmatch(SESSION_ID_PATTERN, value):
        raise invalid("sessionId must be 1-128 characters of letters, digits, '.', '_', ':', '-'")
    return value


def _cursor(value: str | None, session: SessionRecord) -> int:
    latest = session.next_event_seq - 1
    if value is None:
        return 0
    # isdigit() alone accepts '²', which int() refuses; the document says ^[0-9]+$.
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise ApiError(400, "bad_cursor", f"cursor must be a whole number, not {value[:40]!r}")
    cursor = int(value)
    if cursor > latest:
        raise ApiError(
            400, "bad_cursor", f"cursor {cursor} is past the session's latest line ({latest})"
        )
    return cursor


def _request_id(principal: str, key: str | None) -> str | None:
    """The journal request id for an ``Idempotency-Key``, scoped to the caller so two users'
    keys never collide."""
    if key is None:
        return None
    if not key or len(key) > _IDEMPOTENCY_KEY_MAX or not key.isprintable():
        raise ApiError(
            400,
            "bad_idempotency_key",
            f"Idempotency-Key must be 1-{_IDEMPOTENCY_KEY_MAX} printable characters",
        )
    digest = hashlib.sha256(f"{principal}\0{key}".encode()).hexdigest()
    return f"http-{digest[:40]}"


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"the body is larger than {limit} bytes")


def _json(reply: pydantic.BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(reply.model_dump(mode="json", by_alias=True), status_code=status)


# -- error answers ---------------------------------------------------------------------------


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
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = (
        f"no route {request.method} {request.url.path}; see GET /openapi.json"
        if exc.status_code in (404, 405)
        else str(exc.detail)
    )
    return JSONResponse(
        {"code": code, "message": message}, status_code=exc.status_code, headers=exc.headers
    )


async def _client_gone(request: Request, exc: Exception) -> Response:
    # A client that hangs up mid-body is the network's doing, not a fault of ours. Nobody is
    # left to read the answer (the server drops it); it is an ordinary 4xx all the same.
    log.info(
        "the client hung up before its body was read (%s %s)", request.method, request.url.path
    )
    return JSONResponse(
        {"code": "client_disconnected", "message": "the client hung up before sending its body"},
        status_code=400,
    )


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    # The store refused the call as a whole (rolled back): nothing of the request was written,
    # so the client may send the same request again; a full store stays full until an
    # operator frees space, which 507 says apart from a passing lock or outage.
    assert isinstance(exc, StoreUnavailableError)
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
    if isinstance(exc, StoreFullError):
        return JSONResponse(
            {"code": "store_full", "message": "the store is out of space; nothing was written"},
            status_code=507,
        )
    return JSONResponse(
        {
            "code": "store_unavailable",
            "message": "the store did not answer in time; nothing was written, retry",
        },
        status_code=503,
        headers={"Retry-After": "1"},
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(
        {"code": "internal", "message": "internal error; the server log has the details"},
        status_code=500,
    )


# Event fields that name another session by its store key: shown as its public id, as every
# id on the wire is (a fork's source and a subagent's parent are the caller's own sessions).
_SESSION_FIELDS = ("forked_from", "parent_session")


def _public_event(event: EventRecord, public: str) -> EventRecord:
    keys = {f: v for f in _SESSION_FIELDS if isinstance(v := event.data.get(f), str)}
    if not keys:
        return replace(event, session_id=public)
    data = {**event.data, **{f: public_session_id(key) for f, key in keys.items()}}
    return replace(event, session_id=public, data=data)
