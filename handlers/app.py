"""The deployable ASGI app: ``uvicorn handlers.app:app`` (or any ASGI server).

Configured entirely by the environment, like the workers: ``FXD_AGENTS`` (required,
``package.module:agents``), ``FXD_STORE`` and ``FXD_QUEUE`` (default: the embedded SQLite
store and the in-process queue), ``FXD_HTTP_TOKENS`` or ``FXD_HTTP_TOKENS_FILE`` (required
unless ``FXD_HTTP_DEV=1``), ``FXD_WAKE_SECRET`` (enables ``POST /wake``). The route logic is
in :mod:`fxdurable.http`; this file only builds the object a server imports.
"""

from __future__ import annotations

from fxdurable.http import app_from_env

app = app_from_env()
