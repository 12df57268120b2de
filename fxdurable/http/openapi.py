"""The OpenAPI 3.1 document of the HTTP API, built from the pydantic models it validates with,
so the published schema and the checks made on a request cannot drift apart."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from fxdurable import __version__
from fxdurable.core.events import WIRE_VERSION
from fxdurable.http.erase_route import EraseReply
from fxdurable.http.lines import line_adapter
from fxdurable.http.schemas import (
    AbortReply,
    AbortRequest,
    AnswerReply,
    AnswerRequest,
    ChatReceipt,
    ChatRequest,
    CrashReply,
    DemoReply,
    ErrorReply,
    ForkReply,
    ForkRequest,
    HistoryReply,
    SessionReply,
    SessionsReply,
    SteerReply,
    SteerRequest,
    TraceReply,
    WakeReply,
    WakeRequest,
)
from fxdurable.http.scoping import SESSION_ID_PATTERN
from fxdurable.http.sessions_list import MAX_LIMIT, SESSION_STATES
from fxdurable.http.tool_schemas import AgentsReply, CallsReply

__all__ = ["openapi_document"]

_REQUESTS = (ChatRequest, SteerRequest, AbortRequest, ForkRequest, AnswerRequest, WakeRequest)
_REPLIES = (
    EraseReply,
    ChatReceipt,
    SteerReply,
    AbortReply,
    SessionReply,
    SessionsReply,
    HistoryReply,
    TraceReply,
    ForkReply,
    AnswerReply,
    WakeReply,
    DemoReply,
    CrashReply,
    AgentsReply,
    CallsReply,
    ErrorReply,
)
_ERRORS = {
    "400": "malformed JSON, a bad cursor or a bad Idempotency-Key",
    "400-list": "a state, limit or after that is not one this route takes",
    "401": "missing or invalid credentials",
    "404": "the caller has no session with this id (ids are per caller)",
    "408": "the body did not arrive within the body timeout (body_timeout)",
    "409": "busy (when_busy=reject: AgentBusyError), an Idempotency-Key reused, or a fork "
    "into an id the caller already uses for another session (SessionExistsError), or that "
    "another fork is being made into at the same moment (fork_conflict)",
    "409-answer": "the session's turn waits for no answer: nothing was asked, or it was "
    "answered already (no_pending_question)",
    "409-erase": "a turn is queued or running (session_busy): erase with ?force=true, which "
    "aborts it first",
    "413": "body or prompt too large",
    "422": "the body does not match its schema",
    "422-fork": "the body does not match its schema, or `after` names no settled point of "
    "the session (ForkPointError)",
    "422-answer": "the body does not match its schema, or the answer cannot apply to the "
    "question: a rewrite whose input does not validate against the tool, or of a question "
    "that is not about a call (invalid_answer)",
    "507-fork": "the store cannot hold this fork (fork_too_large), or is out of space "
    "(store_full); nothing of the fork is visible",
    "429": "too much steering already waiting for the turn's next model call",
    "404-demo": "not in demo mode (fxdurable serve --dev --demo)",
}


def _ref(model: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json_body(model: type) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(model)}}}


def _reply(model: type, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _errors(*statuses: str) -> dict[str, Any]:
    """Error replies by status; ``"422-fork"`` is status 422 with the fork's description."""
    return {s.partition("-")[0]: _reply(ErrorReply, _ERRORS[s]) for s in statuses}


def _stream(description: str) -> dict[str, Any]:
    return {
        "description": description + " One JSON object per line (Line), its `type` one of "
        "the line vocabulary (docs: HTTP API, the line stream).",
        "content": {"application/x-ndjson": {"schema": {"$ref": "#/components/schemas/Line"}}},
    }


_SESSION_QUERY = {
    "name": "sessionId",
    "in": "query",
    "required": True,
    "schema": {"type": "string", "pattern": SESSION_ID_PATTERN},
}
_SESSION_PATH = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": SESSION_ID_PATTERN},
}


def _line_schemas() -> dict[str, Any]:
    """``Line`` (a union discriminated by ``type``) and one schema per line type."""
    union = line_adapter().json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    defs: dict[str, Any] = union.pop("$defs")
    union["description"] = (
        "One line of a chat stream; `cursor` resumes the stream just after it. "
        "One schema per `type`."
    )
    return {**defs, "Line": union}


def openapi_document() -> dict[str, Any]:
    _, requests = models_json_schema(
        [(m, "validation") for m in _REQUESTS],
        by_alias=True,
        ref_template="#/components/schemas/{model}",
    )
    _, replies = models_json_schema(
        [(m, "serialization") for m in _REPLIES],
        by_alias=True,
        ref_template="#/components/schemas/{model}",
    )
    schemas = {**requests.get("$defs", {}), **replies.get("$defs", {}), **_line_schemas()}
    secured: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fxdurable",
            "version": __version__,
            # The line vocabulary's version (fxdurable.core.events): its major part changes
            # when an event type or a payload field is renamed or removed.
            "x-wire-version": WIRE_VERSION,
            "description": "Durable agent turns: admit a prompt, stream the turn as JSON "
            "lines with cursors, reconnect, steer, abort.",
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/chat": {
                "post": {
                    "summary": "Admit a prompt and stream its turn",
                    "security": secured,
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                            "description": "a retry with the same key is the same submission",
                        }
                    ],
                    "requestBody": _json_body(ChatRequest),
                    "responses": {
                        "200": _stream("The turn, from turn_start to turn_end."),
                        "202": _reply(
                            ChatReceipt,
                            "Receipt mode (FXD_HTTP_MODE=receipt, the AWS Lambda function): "
                            "admitted and queued; read the turn with GET /chat from `cursor`.",
                        ),
                        **_errors("400", "401", "404", "408", "409", "413", "422"),
                    },
                },
                "get": {
                    "summary": "Reconnect: every line after a cursor, then the next turns",
                    "security": secured,
                    "parameters": [
                        _SESSION_QUERY,
                        {
                            "name": "cursor",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "pattern": "^[0-9]+$"},
                        },
                    ],
                    "responses": {
                        "200": _stream(
                            "Lines after the cursor; ends after an idle timeout. In receipt "
                            "mode, a long poll: the lines there are as soon as there are any, "
                            "else after the long-poll wait a stream_end line (idle) with the "
                            "cursor to poll from again."
                        ),
                        **_errors("400", "401", "404", "422"),
                    },
                },
            },
            "/steer": {
                "post": {
                    "summary": "Steer the running turn (or start one when none runs)",
                    "security": secured,
                    "requestBody": _json_body(SteerRequest),
                    "responses": {
                        "200": _reply(SteerReply, "Recorded durably."),
                        **_errors("400", "401", "404", "408", "413", "422", "429"),
                    },
                }
            },
            "/abort": {
                "post": {
                    "summary": "Abort every unsettled submission of the session",
                    "security": secured,
                    "requestBody": _json_body(AbortRequest),
                    "responses": {
                        "200": _reply(AbortReply, "The abort intent is recorded."),
                        **_errors("400", "401", "404", "408", "413", "422"),
                    },
                }
            },
            "/sessions": {
                "get": {
                    "summary": "The caller's sessions, newest updated first",
                    "description": "Under --dev the list also holds sessions made in process "
                    "(no owner), such as `fxdurable demo`'s `engineer`.",
                    "security": secured,
                    "parameters": [
                        {
                            "name": "state",
                            "in": "query",
                            "required": False,
                            "description": "only sessions in these states (repeat it for "
                            "several: ?state=running&state=waiting)",
                            "schema": {
                                "type": "array",
                                "items": {"type": "string", "enum": list(SESSION_STATES)},
                            },
                            "style": "form",
                            "explode": True,
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                        },
                        {
                            "name": "after",
                            "in": "query",
                            "required": False,
                            "description": "the `next` of the previous page",
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {
                        "200": _reply(SessionsReply, "A page of sessions."),
                        **_errors("400-list", "401"),
                    },
                }
            },
            "/sessions/{session_id}": {
                "get": {
                    "summary": "A session's state and latest submissions",
                    "security": secured,
                    "parameters": [_SESSION_PATH],
                    "responses": {
                        "200": _reply(SessionReply, "The session."),
                        **_errors("401", "404", "422"),
                    },
                },
                "delete": {
                    "summary": "Erase the session: its journal, events, state, the blobs no "
                    "other session names, its subagents' sessions; ?force=true while a turn runs",
                    "security": secured,
                    "parameters": [
                        _SESSION_PATH,
                        {
                            "name": "force",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "boolean", "default": False},
                        },
                    ],
                    "responses": {
                        "200": _reply(EraseReply, "Erased: nothing of it is left."),
                        **_errors("401", "404", "409-erase", "422"),
                    },
                },
            },
            "/sessions/{session_id}/history": {
                "get": {
                    "summary": "The conversation, as the model reads it",
                    "security": secured,
                    "parameters": [_SESSION_PATH],
                    "responses": {
                        "200": _reply(HistoryReply, "Every message, oldest first."),
                        **_errors("401", "404", "422"),
                    },
                }
            },
            "/sessions/{session_id}/trace": {
                "get": {
                    "summary": "The session's timeline, as `fxdurable trace` prints it",
                    "security": secured,
                    "parameters": [_SESSION_PATH],
                    "responses": {
                        "200": _reply(
                            TraceReply,
                            "One line per step a person reads, each turn's summary and the "
                            "token total; `forkAfter` is a fork point.",
                        ),
                        **_errors("401", "404", "422"),
                    },
                }
            },
            "/sessions/{session_id}/fork": {
                "post": {
                    "summary": "Start a new session from this one's conversation as it was "
                    "after a submission or any recorded step",
                    "security": secured,
                    "parameters": [_SESSION_PATH],
                    "requestBody": _json_body(ForkRequest),
                    "responses": {
                        "201": _reply(ForkReply, "The fork exists, at rest, with no work."),
                        "200": _reply(ForkReply, "This same fork existed already (a retry)."),
                        **_errors("400", "401", "404", "408", "409", "413", "422-fork", "507-fork"),
                    },
                }
            },
            "/sessions/{session_id}/answer": {
                "post": {
                    "summary": "Answer the question the session's turn waits on; the turn goes on",
                    "security": secured,
                    "parameters": [_SESSION_PATH],
                    "requestBody": _json_body(AnswerRequest),
                    "responses": {
                        "200": _reply(AnswerReply, "The answer is durable; the turn is woken."),
                        **_errors("400", "401", "404", "408", "409-answer", "413", "422-answer"),
                    },
                }
            },
            "/sessions/{session_id}/calls": {
                "get": {
                    "summary": "The session's tool calls, with their input, status and result",
                    "security": secured,
                    "parameters": [_SESSION_PATH],
                    "responses": {
                        "200": _reply(CallsReply, "Every call, as the store lists them."),
                        **_errors("401", "404", "422"),
                    },
                }
            },
            "/agents": {
                "get": {
                    "summary": "The agents served, with their tools and each tool's kind",
                    "security": secured,
                    "responses": {
                        "200": _reply(AgentsReply, "Every agent, subagents included."),
                        **_errors("401"),
                    },
                }
            },
            "/demo": {
                "get": {
                    "summary": "Demo mode only: the worker process that runs the turns",
                    "security": secured,
                    "responses": {
                        "200": _reply(DemoReply, "Demo mode is on."),
                        **_errors("401", "404-demo"),
                    },
                }
            },
            "/demo/crash": {
                "post": {
                    "summary": "Demo mode only: SIGKILL the worker process (kill -9) and start "
                    "another, which recovers the turns in flight",
                    "security": secured,
                    "responses": {
                        "200": _reply(CrashReply, "Killed and replaced."),
                        **_errors("401", "404-demo"),
                    },
                }
            },
            "/wake": {
                "post": {
                    "summary": "Run a session until rest or deadline (signed; for schedulers)",
                    "parameters": [
                        {
                            "name": "X-Fxd-Signature",
                            "in": "header",
                            "required": True,
                            "schema": {"type": "string"},
                            "description": "t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.'+body>",
                        }
                    ],
                    "requestBody": _json_body(WakeRequest),
                    "responses": {
                        "200": _reply(WakeReply, "The session ran until rest or its deadline."),
                        "401": _reply(ErrorReply, "a missing, forged or stale signature"),
                        "404": _reply(ErrorReply, "no session with this key"),
                        **_errors("400", "408", "413", "422"),
                    },
                }
            },
        },
    }
