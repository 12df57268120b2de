"""What every route of the HTTP API shares: the runtime, authentication, session ownership,
bodies and their limits, the wake, and the readers a stream tails. The routes themselves are in
:mod:`fxdurable.http.turn_routes` and :mod:`fxdurable.http.session_routes`; the app that mounts
them in :mod:`fxdurable.http.app`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pydantic
from starlette.requests import Request
from starlette.responses import JSONResponse

from fxdurable.core.records import EventRecord, SessionRecord
from fxdurable.http.auth import Authenticate
from fxdurable.http.lines import Progress
from fxdurable.http.problems import ApiError, invalid, session_not_found, unauthorized
from fxdurable.http.scoping import (
    SESSION_ID_PATTERN,
    public_session_id,
    session_key,
)
from fxdurable.http.settings import HttpSettings
from fxdurable.http.stream import ReadEvents, ReadProgress, RunningProgress
from fxdurable.http.visibility import find_session
from fxdurable.runtime.crossing import durable
from fxdurable.runtime.runtime import Runtime
from fxdurable.runtime.task_view import running_task

__all__ = [
    "EVENTS_PER_READ",
    "IDEMPOTENCY_KEY_MAX",
    "NDJSON",
    "Body",
    "RouteBase",
    "cursor_param",
    "json_reply",
    "parse_body",
    "public_event",
    "request_id_for",
    "session_id_param",
    "too_large",
]

log = logging.getLogger("fxdurable.http")


Body = TypeVar("Body", bound=pydantic.BaseModel)
NDJSON = "application/x-ndjson"
EVENTS_PER_READ = 200
IDEMPOTENCY_KEY_MAX = 200


class RouteBase:
    def __init__(self, runtime: Runtime, authenticate: Authenticate, settings: HttpSettings):
        self._rt = runtime
        self._authenticate = authenticate
        self._settings = settings
        self._openapi: dict[str, Any] | None = None  # built on first request (cold starts)

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
            raise too_large(limit)
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
                        raise too_large(limit)
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

    async def _body(self, request: Request, model: type[Body]) -> Body:
        return parse_body(model, await self._raw_body(request))

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
            events = await durable(journal.read, lambda v: v.events(key, after, EVENTS_PER_READ))
            return [public_event(e, public) for e in events]

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


def parse_body(model: type[Body], raw: bytes) -> Body:
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


def session_id_param(value: str | None) -> str:
    if value is None:
        raise invalid("sessionId is required")
    if not re.fullmatch(SESSION_ID_PATTERN, value):
        raise invalid("sessionId must be 1-128 characters of letters, digits, '.', '_', ':', '-'")
    return value


def cursor_param(value: str | None, session: SessionRecord) -> int:
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


def request_id_for(principal: str, key: str | None) -> str | None:
    """The journal request id for an ``Idempotency-Key``, scoped to the caller so two users'
    keys never collide."""
    if key is None:
        return None
    if not key or len(key) > IDEMPOTENCY_KEY_MAX or not key.isprintable():
        raise ApiError(
            400,
            "bad_idempotency_key",
            f"Idempotency-Key must be 1-{IDEMPOTENCY_KEY_MAX} printable characters",
        )
    digest = hashlib.sha256(f"{principal}\0{key}".encode()).hexdigest()
    return f"http-{digest[:40]}"


def too_large(limit: int) -> ApiError:
    return ApiError(413, "body_too_large", f"the body is larger than {limit} bytes")


def json_reply(reply: pydantic.BaseModel, status: int = 200) -> JSONResponse:
    return JSONResponse(reply.model_dump(mode="json", by_alias=True), status_code=status)


# Event fields that name another session by its store key: shown as its public id, as every
# id on the wire is (a fork's source and a subagent's parent are the caller's own sessions).
_SESSION_FIELDS = ("forked_from", "parent_session")


def public_event(event: EventRecord, public: str) -> EventRecord:
    keys = {f: v for f in _SESSION_FIELDS if isinstance(v := event.data.get(f), str)}
    if not keys:
        return replace(event, session_id=public)
    data = {**event.data, **{f: public_session_id(key) for f, key in keys.items()}}
    return replace(event, session_id=public, data=data)
