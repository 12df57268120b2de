"""Build the HTTP app from the environment: what ``fxdurable serve`` and ``handlers/`` use."""

from __future__ import annotations

import logging
import os
from dataclasses import replace

from starlette.applications import Starlette

from fxdurable.errors import ConfigurationError
from fxdurable.http.app import create_app
from fxdurable.http.auth import Authenticate, BearerTokens, dev_principal, tokens_from_env
from fxdurable.http.demo_mode import DemoWorker
from fxdurable.http.settings import HttpSettings
from fxdurable.runtime.agent_spec import load_agents
from fxdurable.runtime.models.announce import announce_model_endpoints
from fxdurable.runtime.runtime import Runtime
from fxdurable.runtime.worker import WorkerSettings

__all__ = ["app_from_env"]

log = logging.getLogger("fxdurable.http")


def app_from_env(
    *,
    dev: bool | None = None,
    tokens_file: str | None = None,
    agents: str | None = None,
    store: str | None = None,
    queue: str | None = None,
    invocation_budget_s: float | None = None,
    settings: HttpSettings | None = None,
    demo: DemoWorker | None = None,
    app_dir: str | None = None,
) -> Starlette:
    """The app for ``FXD_AGENTS`` on ``FXD_STORE`` / ``FXD_QUEUE`` (default: the embedded
    SQLite store and the in-process queue).

    Authentication is bearer tokens from ``FXD_HTTP_TOKENS`` (``alice=<token>,bob=<token>``)
    or the file ``FXD_HTTP_TOKENS_FILE``. Without any, it refuses to start unless ``dev``
    (``--dev`` or ``FXD_HTTP_DEV=1``), which lets every caller in as the principal ``dev``.
    ``settings`` replaces :meth:`HttpSettings.from_env` (the Lambda adapter's receipt mode);
    With ``demo`` (``fxdurable serve --demo``) this
    process runs no turn: that worker process does (:mod:`fxdurable.http.demo_mode`).
    The agents' module is imported from ``app_dir`` (default ``$FXD_APP_DIR``, else the
    current directory: :func:`fxdurable.runtime.agent_spec.resolve_app_dir`).
    """
    if dev is None:
        dev = os.environ.get("FXD_HTTP_DEV") == "1"
    spec = agents or os.environ.get("FXD_AGENTS")
    if not spec:
        raise ConfigurationError(
            "name the agents to serve: --agents package.module:agents (or FXD_AGENTS)"
        )
    loaded = load_agents(spec, app_dir=app_dir)
    announce_model_endpoints(loaded, process="fxdurable HTTP app")
    authenticate = _authenticator(dev, tokens_file)
    budget = invocation_budget_s
    if budget is None and os.environ.get("FXD_INVOCATION_BUDGET_S"):
        budget = float(os.environ["FXD_INVOCATION_BUDGET_S"])
    runtime = Runtime(
        loaded,
        store=store,
        queue=queue,
        settings=WorkerSettings.from_env(),
        invocation_budget_s=budget,
        concurrency=0 if demo is not None else 4,
    )
    settings = settings or HttpSettings.from_env()
    if authenticate is dev_principal:
        # --dev: / opens the console, which sees in-process sessions (make demo's) too.
        settings = replace(settings, dev=True)
    return create_app(runtime, authenticate=authenticate, settings=settings, demo=demo)


def _authenticator(dev: bool, tokens_file: str | None) -> Authenticate:
    tokens = tokens_from_env(tokens_file)
    if tokens:
        if dev:
            log.warning("--dev ignored: bearer tokens are configured")
        return BearerTokens(tokens)
    if dev:
        log.warning("--dev: no authentication; every caller is the principal 'dev'")
        return dev_principal
    raise ConfigurationError(
        "no API tokens configured: set FXD_HTTP_TOKENS='alice=<token>' (or "
        "FXD_HTTP_TOKENS_FILE), or pass --dev (or set FXD_HTTP_DEV=1) to run without "
        "authentication on your machine"
    )
