"""The ASGI application: thin routes over a :class:`~fxdurable.Runtime` (DESIGN §2).

A route authenticates, checks that the caller owns the session, makes one journal transition
(admit, steer, abort) or read, enqueues a wake, and answers. No agent logic lives here: with
the local queue the turn runs in this process's own workers (the lowest latency), with a
remote queue workers elsewhere run it and the stream shows what they record.

Session ids are scoped per principal (:mod:`fxdurable.http.scoping`): a route turns the
caller's public id into the session's store key on the way in, and shows the public id on
the way out, in headers, replies and stream lines.

The routes live by what they do: :mod:`~fxdurable.http.turn_routes` (chat, reconnect, steer,
abort, answer, wake) and :mod:`~fxdurable.http.session_routes` (the reads, fork, OpenAPI,
health), on what they share in :mod:`~fxdurable.http.route_base`; this module mounts them and
maps errors to answers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fxdurable.errors import (
    StoreFullError,
    StoreUnavailableError,
)
from fxdurable.http import console_static
from fxdurable.http.auth import Authenticate
from fxdurable.http.demo_mode import DemoWorker, demo_routes
from fxdurable.http.erase_route import EraseRoutes
from fxdurable.http.problems import ApiError
from fxdurable.http.session_routes import SessionRoutes
from fxdurable.http.settings import HttpSettings
from fxdurable.http.tool_routes import ToolRoutes
from fxdurable.http.turn_routes import TurnRoutes
from fxdurable.runtime.runtime import Runtime

__all__ = ["create_app"]

log = logging.getLogger("fxdurable.http")


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
        Route("/sessions/{session_id}", api.erase, methods=["DELETE"]),
        Route("/sessions/{session_id}/history", api.history, methods=["GET"]),
        Route("/sessions/{session_id}/trace", api.trace, methods=["GET"]),
        Route("/sessions/{session_id}/fork", api.fork, methods=["POST"]),
        Route("/sessions/{session_id}/answer", api.answer, methods=["POST"]),
        Route("/sessions/{session_id}/calls", api.calls, methods=["GET"]),
        Route("/agents", api.agents, methods=["GET"]),
        Route("/wake", api.wake, methods=["POST"]),
        Route("/openapi.json", api.openapi, methods=["GET"]),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/console", console.index, methods=["GET", "HEAD"]),
        Route("/console/{path:path}", console.asset, methods=["GET", "HEAD"]),
        *([] if demo is None else demo_routes(demo, api.principal, runtime)),
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


class _Api(TurnRoutes, SessionRoutes, ToolRoutes, EraseRoutes):
    """Every route, on one object: what create_app mounts."""


# -- error answers ---------------------------------------------------------------------------


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
