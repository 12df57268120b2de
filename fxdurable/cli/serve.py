"""``fxdurable serve``: the HTTP API under uvicorn, on the embedded store by default."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fxdurable.backends import DEFAULT_STORE
from fxdurable.errors import ConfigurationError

if TYPE_CHECKING:  # the http extra may be missing: run_serve says so
    from fxdurable.http.demo_mode import AppRoutes, DemoWorker

__all__ = ["DEMO_AGENTS", "DEMO_PACE_S", "run_serve"]

DEMO_AGENTS = "fxdurable.cli.demo_agent:agents"
# --demo: how long the demo agent's run_tests and deploy each take, so a person can press
# the crash button while a turn runs ($FXD_DEMO_PACE_S overrides it).
DEMO_PACE_S = 2.0
# Open streams get this long to finish on SIGTERM; then the runtime stops its turns at their
# next step boundary (a continuation picks them up) and the clients reconnect from a cursor.
_GRACEFUL_S = 5


def run_serve(
    *,
    host: str,
    port: int,
    agents: str | None,
    store: str | None,
    queue: str | None,
    dev: bool | None,
    tokens_file: str | None,
    invocation_budget_s: float | None,
    verbose: bool,
    demo: bool = False,
    db: str | None = None,
) -> int:
    missing = [m for m in ("starlette", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigurationError(
            f"fxdurable serve needs {' and '.join(missing)}: pip install 'fxdurable[http]'"
        )
    import uvicorn

    from fxdurable.http.env import app_from_env

    if db is not None:
        store = f"sqlite:///{Path(db).resolve()}"
    if agents is None and not os.environ.get("FXD_AGENTS"):
        agents = DEMO_AGENTS
        print(
            f"serving the demo agent ({DEMO_AGENTS}); choose yours with --agents", file=sys.stderr
        )
    worker = _demo_worker(dev, store, queue, agents) if demo else None
    app = app_from_env(
        dev=dev,
        tokens_file=tokens_file,
        agents=agents,
        store=store,
        queue=queue,
        invocation_budget_s=invocation_budget_s,
        demo=worker,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="debug" if verbose else "info",
        timeout_graceful_shutdown=_GRACEFUL_S,
        lifespan="on",
    )
    if worker is None:
        uvicorn.Server(config).run()
        return 0
    pid = worker.start()
    print(
        f"demo mode: turns run in worker process {pid}; the console's crash button "
        "(POST /demo/crash) SIGKILLs it and starts another",
        file=sys.stderr,
    )
    try:
        uvicorn.Server(config).run()
    finally:
        worker.stop()
    return 0


def _demo_worker(
    dev: bool | None, store: str | None, queue: str | None, agents: str | None
) -> DemoWorker:
    """The worker process of ``--demo``, on the server's own store (not started yet)."""
    from fxdurable.http.demo_mode import DemoWorker

    if not (dev if dev is not None else os.environ.get("FXD_HTTP_DEV") == "1"):
        raise ConfigurationError(
            "--demo needs --dev: demo mode is for your own machine (its crash button kills "
            "a process)"
        )
    queue = queue or os.environ.get("FXD_QUEUE") or "local"
    if queue != "local":
        raise ConfigurationError(
            f"--demo runs the turns in a worker process of its own; it takes no queue ({queue})"
        )
    store = store or os.environ.get("FXD_STORE") or DEFAULT_STORE
    spec = agents or os.environ.get("FXD_AGENTS") or DEMO_AGENTS
    command = [sys.executable, "-m", "fxdurable.cli.demo_worker", "--store", store]
    env = {**os.environ, "FXD_DEMO_PACE_S": os.environ.get("FXD_DEMO_PACE_S") or f"{DEMO_PACE_S:g}"}
    return DemoWorker([*command, "--agents", spec], env, routes=_app_routes(spec))


def _app_routes(spec: str) -> AppRoutes | None:
    """The ``demo_routes`` beside the agents ``spec`` names (``module:attribute``), if its
    module has them: the agents' own routes for demo mode (the coding agent's page)."""
    from fxdurable.runtime.agent_spec import import_app_module

    module_name = spec.partition(":")[0]
    module = import_app_module(module_name, named_by=f"--agents {spec}")
    routes = getattr(module, "demo_routes", None)
    if routes is not None and not callable(routes):
        raise ConfigurationError(
            f"{module_name}.demo_routes must be a function of (runtime, principal)"
        )
    return routes
