"""fxdurable over HTTP: an ASGI application to serve (``fxdurable serve``) or mount.

``create_app(runtime, authenticate=...)`` returns a Starlette app with the routes ``POST /chat``
(stream a turn as JSON lines), ``GET /chat`` (reconnect from a cursor), ``POST /steer``,
``POST /abort``, ``GET /sessions`` (the caller's sessions), ``GET /sessions/{id}``,
``GET /sessions/{id}/history``, ``GET /sessions/{id}/trace``, ``POST /wake`` (HMAC-signed, for
schedulers), ``GET /openapi.json`` and the web console's files under ``/console``.
``app_from_env()`` builds one from ``FXD_AGENTS``, ``FXD_STORE``, ``FXD_QUEUE``,
``FXD_HTTP_TOKENS`` and ``FXD_WAKE_SECRET``.

Why Starlette and not FastAPI: measured on the development machine (2 cores, Python 3.11,
best of 7 fresh interpreters, starlette 1.10, fastapi 0.165, pydantic 2.14), importing the
framework and building an app with eight pydantic-validated routes plus its schema took
138 ms with Starlette and 252 ms with FastAPI (bare imports: 74 ms and 221 ms; pydantic alone
38 ms; uvicorn 75 ms). A Lambda pays that on every cold start, and FastAPI's extras (dependency
injection, automatic validation errors) are things the routes here do in a few lines, with
error bodies of our own shape. The OpenAPI document is built from the same pydantic models
the routes validate with (:mod:`fxdurable.http.openapi`).
"""

from __future__ import annotations

from fxdurable.http.app import create_app
from fxdurable.http.auth import Authenticate, BearerTokens, dev_principal
from fxdurable.http.env import app_from_env
from fxdurable.http.problems import ApiError
from fxdurable.http.settings import HttpSettings
from fxdurable.http.signing import SIGNATURE_HEADER, SignatureError, sign_wake, verify_wake

__all__ = [
    "SIGNATURE_HEADER",
    "ApiError",
    "Authenticate",
    "BearerTokens",
    "HttpSettings",
    "SignatureError",
    "app_from_env",
    "create_app",
    "dev_principal",
    "sign_wake",
    "verify_wake",
]
